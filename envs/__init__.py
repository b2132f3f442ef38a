"""Domain adapters: OGBench and robomimic env factories, dataset generation, converters to Minari."""
