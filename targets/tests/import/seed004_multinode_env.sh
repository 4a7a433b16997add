# From /work/shared/seeds/004_7aa62fc825831cba.txt ("方案2: 使用多节点脚本", node 0): the
# launch script of the document is run with its variables on the command line.
NUM_NODES=2 \
NODE_RANK=0 \
MASTER_ADDR="192.168.1.100" \
bash run_multinode.sh
