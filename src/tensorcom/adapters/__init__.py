"""Framework adapters, each imported only when used (and its framework only when a conversion runs).

    tensorcom.adapters.torch   (also tensorcom.torch) ToTorch / to_torch: batches → torch tensors,
                               images permuted and cast as declared; TensorcomDataset (0.1's name)
    tensorcom.adapters.keras   (also tensorcom.keras) StreamDataset: a Connection or Pipeline as a
                               keras.utils.PyDataset for model.fit; images_to_float; choose_backend
    tensorcom.adapters.jax     (also tensorcom.jax) iterate / ToJax / to_jax: batches → jax arrays by
                               jax.device_put, optionally sharded by batch_sharding() over local devices
    tensorcom.adapters.dlpack  (also tensorcom.dlpack) ToDLPack / to_dlpack / DLPackArray: array fields
                               behind __dlpack__, for any framework's from_dlpack, zero-copy

docs/frameworks.md shows a complete training loop for each.
"""
