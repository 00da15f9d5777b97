"""`python -m dwdp_trtllm ...` is the `dwdp` command."""
import sys

from .cli import main

sys.exit(main())
