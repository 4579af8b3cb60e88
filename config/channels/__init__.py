"""One settings module per platform, so each channel's keys live beside nothing else."""
