"""What the model computes on: CPU facts and the allocator set-up (`hardware`), measured kernel
choices (`autotune`), oneDNN's matrix multiply (`onednn`), the linear layer that picks the fastest path
(`linear`), and `--precision auto` (`precision`)."""
