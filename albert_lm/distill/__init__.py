"""Distillation: a small ALBERT taught by a larger transformers encoder, after pretraining and
fine-tuning on the road. `albert distill general` teaches the sentence vectors of an encoder that knows
the language on raw text; `albert distill task` teaches a fine-tuned teacher's predictions on a task. The
teacher's outputs are computed once into a cache on disk (`cache`); the loop (`loop`) trains, evaluates,
saves and resumes like pretraining.
"""
