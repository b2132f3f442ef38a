"""The benchmark runner: configs, the suites and tasks they name, datasets prepared once, runs planned, executed
locally or on Ray, checkpointed and resumed, each writing its folder of results."""
