"""Training: optimizers (LAMB, AdamW), checkpoints, the pretraining and fine-tuning loops and their
configs, distributed set-up and the pretraining monitor."""
