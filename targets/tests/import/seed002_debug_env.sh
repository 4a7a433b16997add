# From /work/shared/seeds/002_13642e4ffd9fc6de.txt ("调试技巧", "启用详细日志" and Q1): the
# variables the document sets before running its examples.
export NCCL_DEBUG=INFO
export NCCL_DEBUG_SUBSYS=ALL
export TORCH_DISTRIBUTED_DEBUG=DETAIL
python 01_nccl_basic.py
