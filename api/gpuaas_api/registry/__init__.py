"""Short-lived, task-scoped registry credentials (runtime secrets of purpose `artifact_pull`) and the
Docker registry token service that honours them."""
