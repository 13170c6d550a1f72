"""What people write, parsed: quantities, precisions, CUDA versions and vramgate.io declarations."""
