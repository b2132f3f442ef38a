def initialize_obs_modality_mapping_from_dict(*args, **kwargs): pass
