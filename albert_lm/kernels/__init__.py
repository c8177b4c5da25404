"""What the model computes on: CPU facts and the allocator set-up (`hardware`), measured kernel
choices (`autotune`), oneDNN's matrix multiply (`onednn`), the linear layer that picks the fastest path
(`linear`), attention on the fastest path (`attention`), `--precision auto` (`precision`) and the
device (`device`). The model calls `linear.Linear`, `linear.shared_weights` and `attention.attention`
and chooses no kernel itself; each speed choice is switched in its own module (`linear.use`,
`attention.use`, `autotune.use`)."""
