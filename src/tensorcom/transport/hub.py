from tensorcom.transport.sharing.hub import Hub, sharing_mode  # noqa: F401  (the old path, named in docs until the move)
