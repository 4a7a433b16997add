# env.sh: sourced by the GPU scripts on a lent machine: the libraries planc loads at run time
# (libz3 from the bundle; NCCL, cuBLAS, NVRTC and cuDNN from PyTorch's installation), NVLink
# multicast off (KINDS.md), and `planc` the bundle's binary unless PLANC names another.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
S=$(python3 -c 'import site; print(site.getsitepackages()[0])')
export LD_LIBRARY_PATH=$root/.dev/lib:$S/nvidia/cu13/lib:$S/nvidia/nccl/lib:$S/nvidia/cudnn/lib:${LD_LIBRARY_PATH:-}
planc=${PLANC:-$root/.dev/planc}
