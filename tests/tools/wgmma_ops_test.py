#!/usr/bin/env python3
"""The generated wgmma wrappers (src/backends/cuda/sm90/wgmma_ops.cuh) are what scripts/gen/wgmma_ops.py prints."""
import os
import subprocess
import sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
r = subprocess.run([sys.executable, os.path.join(root, "scripts", "gen", "wgmma_ops.py"), "--check"])
print("1 passed, 0 failed" if r.returncode == 0 else "0 passed, 1 failed")
sys.exit(r.returncode)
