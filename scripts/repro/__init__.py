"""Library behind scripts/reproduce.py, scripts/sweep.py and scripts/prepare_data.py."""
