"""Pieces shared by every qc_sb3 algorithm."""
