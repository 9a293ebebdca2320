"""Generated protobuf and gRPC code of the agent API (``agent.proto``); regenerate with ``generate.py``."""
