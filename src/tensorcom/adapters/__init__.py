"""Framework adapters, each imported only when used: `tensorcom.adapters.torch` (TensorcomDataset)."""
