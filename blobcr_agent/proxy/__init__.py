"""The checkpointing proxy: the HTTP endpoint guests checkpoint through."""
