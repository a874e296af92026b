"""The ML: one module per stage, each exposing `run(ctx) -> {output_name: directory}`."""
