import os

# Triton kernels must see the interpreter flag before they are defined: without a GPU, run them interpreted.
if not os.environ.get("TRITON_INTERPRET"):
    import torch

    os.environ["TRITON_INTERPRET"] = "0" if torch.cuda.is_available() else "1"
