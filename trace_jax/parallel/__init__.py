"""Device meshes (`data`, `fsdp`, `tensor`), partition rules for params/optimizer/batch, sharded steps."""
