"""One module per `gpuaas` subcommand; each exposes register(subparsers)."""
