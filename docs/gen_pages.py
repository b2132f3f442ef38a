"""Writes docs/results.md and docs/speed.md from the committed files under results/.

Run from the repository root: ``python docs/gen_pages.py``. The pages are committed so that GitHub shows them; the
tests check that they equal what this script writes now.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
ASSETS = DOCS / "assets" / "results"
REPORTS = {
    "Evidence runs": ROOT / "results" / "evidence" / "report",
    "Quickstart on five seeds": ROOT / "results" / "quickstart-seeds" / "report",
    "Chunk execution": ROOT / "results" / "chunk-execution" / "report",
    "Image check": ROOT / "results" / "image-check" / "report",
    "Tasks pilot": ROOT / "results" / "tasks-pilot" / "report",
    "Tasks campaign": ROOT / "results" / "tasks" / "report",
}
INTRODUCTIONS = {
    "Evidence runs": "Two parts, both on OGBench's cube-single task 1 from play data generated here; protocol and "
    "statistics: `docs/evidence.md`, how each folder was run: `results/evidence/README.md`. Part A asks whether "
    "qc_sb3 learns as the reference implementation does: QC and QC-FQL run by qc_sb3's runner and by the reference's "
    "own `main.py` on the same data file with the same settings (`benchmarks/configs/evidence-parity.yaml`). Part B "
    "asks whether the paper's ordering holds at a scale this machine can run: every method of the paper at part A's "
    "protocol (`benchmarks/configs/evidence.yaml`). The tables give each method's success at the end of the offline "
    "phase and of the online phase, with 95% bootstrap intervals over seeds; the curves show the whole runs. Part A's "
    "verdict is the confirmatory comparison below, on fresh seeds fixed in advance.\n\n"
    "How to read them:\n\n"
    "- Part A: offline, the two implementations end alike. Online, part A's own curves put qc_sb3 lower for both "
    "methods; the confirmatory runs, planned before they ran, reproduce neither gap, so it is read as chance: the two "
    "implementations learn alike.\n"
    "- Part B: QC ends ahead of its baselines (BFN, BFN-n, RLPD, RLPD-AC), as in the paper. With chunks the distilled "
    "actor learns (QC-FQL); without them it barely does (FQL, FQL-n). Chunking helps RLPD too: RLPD-AC ends above "
    "RLPD, and level with QC-FQL here, where the paper, on cube-double, has QC-FQL ahead of RLPD-AC.\n"
    "- This is one task at a small scale with three seeds for most methods, hence wide intervals: it shows the "
    "ordering of the methods, not the paper's numbers. Why this task (the pilots on harder tasks learned nothing "
    "within this budget): `results/evidence/pilot/README.md`.",
    "Chunk execution": "Re-planning every k steps (`QC@k1`, `@k2`, `QC-FQL@k1`, `@k2`, three seeds each) against "
    "whole chunks (k = h = 5: `QC-FQL`, `QC`, part A's runs) on part A's protocol, data and seeds "
    "(`benchmarks/configs/chunk-execution.yaml`, "
    "`results/chunk-execution/README.md`); rebuilt by `qc-bench-report results/chunk-execution --also "
    "results/evidence/parity/cube-single-play-singletask-task1-v0/QC "
    "results/evidence/parity/cube-single-play-singletask-task1-v0/QC-FQL --finished-only`. Training does not depend "
    "on how chunks are executed (the buffer samples windows from every step), so the offline-end column isolates "
    "execution at evaluation, and the online-end column adds its effect on the data collected. Each option's decision "
    "cost per env step is on the speed page (`chunk-execution.txt`). How to read it: at this scale re-planning hurts "
    "both methods. Online, where it also changes the data collected, it lowers the end of the phase: QC 0.92 with "
    "whole chunks against 0.57 at k = 2 and 0.27 at k = 1, both intervals below whole chunks'; QC-FQL 0.58 against "
    "0.33 and 0.32, k = 2's interval just overlapping whole chunks'. At the end of the offline phase, where "
    "only evaluation differs, every re-planning mean lies below whole chunks' (QC 0.23 against 0.12-0.13, QC-FQL "
    "0.20 against 0.07-0.15), with overlapping intervals except "
    "QC at k = 2 and QC-FQL at k = 1. A plausible reading: the critic scores whole chunks, and a chunk cut short "
    "after k actions is not the one it scored; the data collected that way is less successful, which the online "
    "phase compounds. Temporal ensembling was not measured here (the option exists; its pair of runs is in the "
    "config).",
    "Image check": "Does QC learn from images? QC with `CnnPolicy` (SB3's NatureCNN, the critic with an encoder of "
    "its own) on image-reach, a point mass reaching a goal seen only as a 36 x 36 RGB image, from 200 noisy scripted "
    "episodes that reach the goal 37% of the time (`benchmarks/configs/image-check.yaml`, "
    "`results/image-check/README.md`): 2000 offline gradient steps, then 6000 online env steps, three seeds. How to "
    "read it: every seed ends the online phase above its own offline end (0.78 to 0.98 on average), so the image "
    "path learns, offline and online. It is a check of the plumbing at a size a CPU runs in minutes, not evidence on "
    "the paper's visual tasks, whose runs train convolutional encoders on 1M frames and need a GPU.",
    "Tasks pilot": "Where does QC's lead over BFN (the same method without chunks) appear on the paper's own "
    "tasks? The pilot runs in slices that each finish within a few hours on two cores "
    "(`results/tasks-pilot/README.md`). The first, "
    "robomimic lift from 300 scripted demonstrations (`benchmarks/configs/evidence-tasks-pilot-lift.yaml`: 2 x 256, "
    "QC with N = 8, two seeds each, 30k offline steps), puts both methods at the ceiling from the first evaluation "
    "(0.90 to 1.00 at every 5k): lift from scripted demonstrations is too easy to separate them, where the paper's "
    "multi-human files mix in worse operators' demos. The second, can (`evidence-tasks-pilot-can.yaml`, seed 0 "
    "of each), separates them: BFN 0.65, QC 0.40 at 30k steps, both still climbing; the paper has no QC lead on can "
    "either (QC 0.47, BFN 0.55 at 100k; its leader there is QC-FQL). The third, puzzle-3x3 task 2 from 1M generated "
    "transitions (`evidence-tasks-pilot-puzzle.yaml`, seed 0, 100k steps), has QC at 0/20 through 60k steps and 0.10 "
    "to 0.20 from 70k to 100k, far below the paper's 1.00 at 100k. The reference implementation's QC, run side by side "
    "on the same data file with the same settings, follows the same curve through 90k (at most 0.20) with critics "
    "that agree step by step, and ends at 0.55: one seed a side cannot tell that last point from the swings of single "
    "runs, and the gap to the paper through 90k is shared by both (2 x 256 networks, N = 8, data generated here), not "
    "qc_sb3's alone. BFN's run here is a first pass to 50k steps (0/20 throughout). The fourth, behavior cloning on "
    "can (`evidence-tasks-pilot-can-bc.yaml`: BFN@N1, BFN with N = 1, one flow sample the critic never scores; seed "
    "0, the can slice's protocol), reaches 0.90 at 30k steps: the scripted can demonstrations are good enough to "
    "imitate, which is why the campaign's FQL and FQL-n stand far above the paper's values there. The "
    "paper's column is its value at 100k steps, its first evaluation.",
    "Tasks campaign": "The paper's ordering on its own tasks, sized by the pilot (`results/tasks/README.md`). "
    "Robomimic can from the pilot's 300 scripted demonstrations (`benchmarks/configs/evidence-tasks-can.yaml`: "
    "QC-FQL against FQL and FQL-n, 2 x 256, 100k offline steps, 20 evaluation episodes every 10k; three seeds "
    "each): QC-FQL reaches the paper's value at 100k (0.87 against 0.89), but so do the methods without chunks (FQL "
    "0.97, FQL-n 0.98, where the paper has 0.45 and 0.53), so the paper's ordering does not appear on can from "
    "scripted demonstrations; FQL and FQL-n even climb faster. The difference from the paper is in the baselines, and "
    "the data accounts for it: behavior cloning alone reaches 0.90 at 30k steps on the same file (the pilot's fourth "
    "slice), for the scripted demonstrations are all successes of one skill level, where the paper's multi-human "
    "files mix operators of three proficiency levels. OGBench puzzle-3x3 task 2 from 1M generated play transitions "
    "(`benchmarks/configs/evidence-tasks-puzzle.yaml`: QC with N = 8 against BFN and BFN-n, 2 x 256, 100k offline "
    "steps; three seeds each): all three stand far below the paper's QC (1.00); QC ends above BFN-n in every seed "
    "(0.22 over its three seeds against 0.00 in each of BFN-n's) and above BFN on average (0.17: 0.45, 0.00 and 0.05), "
    "far less than the paper's margin and with overlapping intervals, but it succeeds earlier and in every seed "
    "(first successes at 40k-70k steps, BFN's at 90k, 100k or not by 100k); the reference's QC was slow too on the "
    "same data (0.55 at 100k, one seed). In each seed QC's critic rises from its floor some 30k-40k steps before "
    "BFN's, as chunked backups should, while BFN-n's stays at the floor. The paper's column is its value at 100k "
    "steps, its first evaluation.",
    "Quickstart on five seeds": "The quickstart's config on seeds 0-4 (`benchmarks/configs/quickstart-seeds.yaml`) on "
    "an AMD EPYC with AVX-512, to show where the one seed `bash benchmarks/quickstart.sh` runs (seed 0) lies among "
    "others: the highest of the five after the online phase. Each seed's figures are in "
    "`results/quickstart-seeds/README.md`; seed 0's on CPUs whose matrix kernels differ in the last bits are in "
    "`results/quickstart-avx2/README.md` (where torch reports AVX2) and `results/quickstart-xeon/README.md` (an Intel "
    "Xeon with AVX-512).",
}
DIAGNOSIS = ROOT / "results" / "diagnosis"
CONFIRM = DIAGNOSIS / "confirm"
CONFIRM_INTRODUCTION = (
    "Part A's test, planned before its runs started (`results/diagnosis/confirm/README.md`): fresh seeds of QC and "
    "QC-FQL on both sides, one exact permutation test per method of equal per-run curve means, two-sided at 2.5% "
    "(Bonferroni over the two methods). A p-value above that level means the runs give no evidence that qc_sb3 and the "
    "reference learn differently; the difference column, with its 95% bootstrap interval, bounds how far apart they "
    "can be. The last two columns test each evaluation on its own, at the Bonferroni level over the evaluations."
)
SPEED = ROOT / "results" / "speed"
# Logs the speed page shows whole, beside the step-time tables (of the others it shows the header line).
WHOLE_LOGS = ("against-sac.txt", "chunk-execution.txt", "matmul-onednn-avx2.txt", "seed-steps.txt")
LOG_NOTES = {
    "against-sac.txt": "Stable-Baselines3's SAC against qc_sb3's cheapest settings at the same widths, env steps per "
    "second of `learn()` with one gradient step per env step: RLPD with K = 2 critics and h = 1 is SAC plus the "
    "reference's LayerNorm critics; QC with h = 1 and N = 1 replaces SAC's Gaussian actor by a flow integrated in T = "
    "10 Euler steps, for each TD target and each decision (with one sample, best-of-N scores nothing). The ratios "
    "are what those additions, and qc_sb3's chunk buffer and action queue, cost per env step at this size.",
}
SEED_STEPS_NOTE = (
    "Seeds on one machine (`--seeds`): seed-steps per second (gradient steps per second times the seeds) of every "
    "way of training S seeds on the machine, one process holding a `SeedParallel` of S (its updates stacked, or its "
    "seeds one after another) or two one-thread processes of S / 2 each, against the reference's best single-seed "
    "figure in the same command (one process at the machine's threads, or two one-thread processes summed). The "
    "cost per 1000 offline gradient steps per seed of the paper's methods is in `results/speed/seeds-cost.csv`."
)
LOG_NOTES["seed-steps.txt"] = SEED_STEPS_NOTE
LOG_NOTES["matmul-onednn-avx2.txt"] = (
    "oneDNN's matmul against PyTorch's BLAS on a CPU with AVX2 alone: the products of a 256-wide layer in GFLOP/s, "
    "whole gradient steps and decisions in ms with oneDNN forced on one side and the BLAS on the other (a ratio over "
    "1 means oneDNN was faster), then the flow's integration without autograd on fused oneDNN calls and in place, at "
    "batch sizes from a decision's few rows to a TD target's. On the host of `matmul-onednn.txt` and "
    "`matmul-onednn-steps.txt`, where oneDNN ran at 172 GFLOP/s on one core (more than AVX2 reaches: an AVX-512 CPU), "
    "it was ahead; the networks' layers therefore take oneDNN only where PyTorch reports the CPU capability AVX512, "
    "and elsewhere the flow integrates 32 rows or more in place."
)
LINK = re.compile(r"\[([^\]]+)\]\(([^)]+)\)")
# A diagnosis note's section of run windows and machines: kept in the results file, left off the page.
RUN_RECORD = "\n## Run record\n"
DATE = re.compile(r"\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}Z?)?( \d{2}:\d{2}(-\d{2}:\d{2})?( UTC)?)?,?\s*")


def demote(markdown: str, levels: int) -> str:
    """Moves every heading of ``markdown`` down by ``levels`` and turns its links into plain text.

    :param markdown: Markdown text
    :param levels: How many levels to add to each heading
    :return: The rewritten text
    """
    lines = []
    for line in markdown.splitlines():
        if line.startswith("#"):
            line = "#" * levels + line
        lines.append(LINK.sub(r"\1 (`\2`)", line))
    return "\n".join(lines).strip() + "\n"


def report_section(title: str, folder: Path) -> str:
    """A section holding a report folder's summary.md and its plots (copied under docs/assets/results/).

    :param title: Heading of the section
    :param folder: A folder written by the report command
    :return: The section's Markdown
    """
    body = [f"## {title}", ""]
    if title in INTRODUCTIONS:
        body += [INTRODUCTIONS[title], ""]
    body += [f"From `{folder.relative_to(ROOT)}/summary.md`.", ""]
    body.append(demote((folder / "summary.md").read_text(encoding="utf-8"), 2))
    plots = sorted(folder.glob("*/*.png")) + sorted(folder.glob("*.png"))
    if plots:
        body += ["### Learning curves", ""]
    for plot in plots:
        target = ASSETS / folder.relative_to(ROOT / "results") / plot.relative_to(folder)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(plot, target)
        body += [f"![{plot.stem}]({target.relative_to(DOCS).as_posix()})", ""]
    return "\n".join(body)


def table_lines(markdown: str) -> list[str]:
    """The lines of ``markdown`` that belong to a Markdown table.

    :param markdown: Markdown text
    :return: Its table lines, in order
    """
    return [line for line in markdown.splitlines() if line.startswith("|")]


def confirm_section() -> str:
    """The confirmatory comparison: from each committed ``compare-<method>.md`` under results/diagnosis/confirm/, its
    table's header and the row of the method it tests.

    :return: The section's Markdown
    """
    body = ["## Confirmatory comparison", "", CONFIRM_INTRODUCTION, ""]
    for compare in sorted(CONFIRM.glob("compare-*.md")):
        method = compare.stem.removeprefix("compare-")
        body += [f"### {method}'s test", "", f"From `{compare.relative_to(ROOT)}`.", ""]
        lines = table_lines(compare.read_text(encoding="utf-8"))
        body += [*lines[:2], *[line for line in lines[2:] if line.split("|")[2].strip() == method], ""]
    return "\n".join(body)


def results_page() -> str:
    """The results page: each report folder that exists, then the diagnosis notes.

    :return: The page's Markdown
    """
    parts = ["# Results", "", "Generated by `python docs/gen_pages.py` from the committed files under `results/`.", ""]
    parts += [report_section(title, folder) for title, folder in REPORTS.items() if (folder / "summary.md").exists()]
    parts.append(confirm_section())
    parts += ["## Diagnosis", ""]
    for readme in sorted(DIAGNOSIS.glob("*/README.md")):
        note, *record = readme.read_text(encoding="utf-8").split(RUN_RECORD)
        parts += [f"### `{readme.parent.relative_to(ROOT)}`", "", demote(note, 3)]
        if record:
            parts += [f"When and where these runs were made: `{readme.relative_to(ROOT)}`, section \"Run record\".", ""]
    return "\n".join(parts)


def speed_page() -> str:
    """The speed page: the step-time tables whole, and each other log's header line.

    :return: The page's Markdown
    """
    parts = [
        "# Speed",
        "",
        "Generated by `python docs/gen_pages.py` from the committed logs `results/speed/*.txt`. Each log is headed by the "
        "command as it was run at the commit it names; the step-time benchmark is now `python -m qc_sb3.benchmarks.speed` "
        "and the studies of one part each are the modules of `qc_sb3.benchmarks.speed`. How to choose the options these "
        "figures measure: [speed options](guides/speed-options.md).",
        "",
    ]
    for log in sorted(SPEED.glob("*.txt")):
        lines = log.read_text(encoding="utf-8").splitlines()
        header = DATE.sub("", lines[0].lstrip("# ")).strip()
        parts += [f"## `{log.name}`", "", f"`{header}`", ""]
        if log.name in LOG_NOTES:
            parts += [LOG_NOTES[log.name], ""]
        if log.name.startswith("step-time-") or log.name in WHOLE_LOGS:
            parts += ["```text", *[line for line in lines if not line.startswith("#")], "```", ""]
    return "\n".join(parts)


def main() -> None:
    """Writes both pages."""
    if ASSETS.exists():
        shutil.rmtree(ASSETS)
    (DOCS / "results.md").write_text(results_page(), encoding="utf-8")
    (DOCS / "speed.md").write_text(speed_page(), encoding="utf-8")


if __name__ == "__main__":
    main()
