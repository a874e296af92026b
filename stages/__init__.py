"""The ML, on two floors. Here: one module per stage (`run(ctx) -> {output_name: directory}`, see
contract.py) and the contract itself. Below: ml/, the shared pieces the stages are built from, and
backends/, the engines a stage can hand its work to; neither imports a stage."""
