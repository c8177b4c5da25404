"""The paper's ablations, reproduced in small pretraining runs (`albert reproduce CLAIM`)."""
