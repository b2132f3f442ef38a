"""The lab around qc_sb3, installed as ``qc_sb3.benchmarks``: the benchmark runner (:mod:`.runner`, entry point
:mod:`.run`), reports (:mod:`.reports`, entry point :mod:`.report`), speed benchmarks (:mod:`.speed`) and parity tools
against the reference (:mod:`.parity`)."""
