"""Reference Stable Diffusion app: Ray Data preprocessing and Ray Train FSDP2 training.

`python -m sd_reference {make-data,preprocess,train,export,sample,bench} --help`.
"""

__version__ = "0.1.0"
