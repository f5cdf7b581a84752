"""latte inside inference engines: adapters that let an engine call latte without a patch.

- :mod:`latte.integrations.vllm`: the vLLM plugin (``vllm.general_plugins: latte``).
"""
