"""Framework adapters, each imported only when used.

    tensorcom.adapters.torch   (also tensorcom.torch) ToTorch / to_torch: batches → torch tensors,
                               images permuted and cast as declared; TensorcomDataset (0.1's name)
"""
