# spanprep trainer: CUDA + PyTorch (torch==2.13.0, the pyproject.toml pin) + DeepSpeed 0.19.8 + spanprep, ready for
# multi-node launches with the deepspeed launcher (pdsh over ssh) or one launcher per node (--no_ssh).
#
#   docker build -f docker/trainer.Dockerfile -t REGISTRY/spanprep-trainer:0.1.0 .
#
# Every node runs the same image; by default a container starts sshd on port 2222 (the deepspeed launcher
# reaches the other nodes through it: `deepspeed --ssh_port 2222 --hostfile ...`). docs/RUNNING.md has the
# complete commands (docker run flags, hostfile, NCCL environment, resume).
#
# CUDA: pip installs torch 2.13.0 from PyPI, whose Linux x86_64 wheel is a CUDA build carrying its own CUDA
# runtime, cuDNN and NCCL (nvidia-* wheels). The base image adds the CUDA toolkit (nvcc) that DeepSpeed needs to
# compile its fused ops; its CUDA major version must equal the one torch was built with. The build checks
# that and stops with the version to use if they differ (--build-arg CUDA_IMAGE=...).

ARG CUDA_IMAGE=nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04
FROM ${CUDA_IMAGE}

# GPU architectures DeepSpeed's ops are compiled for (A100 8.0, A10/A40/L4 8.6/8.9, H100 9.0).
ARG TORCH_CUDA_ARCH_LIST="8.0;8.6;8.9;9.0"
# Pre-compile DeepSpeed's fused Adam (the optimizer of trainer/configs/zero*.json on GPUs) into the image,
# so that ranks do not JIT-compile it at start; 0 = compile on first use instead.
ARG DS_BUILD_FUSED_ADAM=1

ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/cuda/bin:${PATH} \
    CUDA_HOME=/usr/local/cuda \
    TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST} \
    TORCH_EXTENSIONS_DIR=/opt/torch_extensions

# Python 3.11 (deadsnakes; Ubuntu 22.04 ships 3.10), a compiler and ninja for DeepSpeed's ops, libaio for its
# async I/O op, openssh + pdsh for the multi-node launcher, libibverbs for NCCL over InfiniBand/RoCE.
RUN apt-get update \
 && apt-get install -y --no-install-recommends software-properties-common gpg-agent ca-certificates curl \
 && add-apt-repository -y ppa:deadsnakes/ppa \
 && apt-get update \
 && apt-get install -y --no-install-recommends \
        python3.11 python3.11-venv python3.11-dev \
        build-essential ninja-build git libaio-dev \
        openssh-server openssh-client pdsh \
        libibverbs1 ibverbs-providers rdma-core iproute2 \
 && rm -rf /var/lib/apt/lists/* \
 && python3.11 -m venv /opt/venv \
 && pip install --upgrade pip setuptools wheel

WORKDIR /opt/spanprep
COPY requirements/constraints.txt requirements/language-data.txt requirements/

# 1. torch first (DeepSpeed's build imports it), then check it is a CUDA build matching the toolkit's major version.
RUN pip install -c requirements/constraints.txt torch==2.13.0 \
 && python -c "import re, subprocess, torch; \
built = torch.version.cuda; \
assert built, 'torch ' + torch.__version__ + ' is a CPU build: the trainer image needs the CUDA build'; \
nvcc = re.search(r'release (\d+)\.(\d+)', subprocess.run(['nvcc', '--version'], capture_output=True, text=True).stdout).groups(); \
assert built.split('.')[0] == nvcc[0], 'torch %s was built with CUDA %s but the base image has CUDA %s.%s: rebuild with --build-arg CUDA_IMAGE=nvidia/cuda:%s.x-cudnn-devel-ubuntu22.04' % (torch.__version__, built, nvcc[0], nvcc[1], built); \
print('torch', torch.__version__, 'CUDA', built, '/ nvcc', '.'.join(nvcc))"

# 2. DeepSpeed against that torch (no build isolation, so its setup sees torch and can pre-compile ops;
#    DS_ACCELERATOR=cuda because the build machine need not have a GPU).
RUN DS_ACCELERATOR=cuda DS_BUILD_FUSED_ADAM=${DS_BUILD_FUSED_ADAM} pip install -c requirements/constraints.txt --no-build-isolation deepspeed==0.19.8

# 3. The language data exactly as `make setup` installs it (sha256-pinned), then spanprep with the trainer's
#    extras: report (TensorBoard monitor), hf (export to Hugging Face) and cloud (artifacts in s3:// and gs://
#    buckets for --data, trainer.export --out and datasets/fsspec), every version from constraints.txt.
COPY pyproject.toml README.md ./
COPY pipeline/ pipeline/
COPY schemas/ schemas/
COPY trainer/ trainer/
RUN pip install --require-hashes --no-deps -r requirements/language-data.txt \
 && pip install -c requirements/constraints.txt ".[report,hf,cloud]" \
 && pip check \
 && python -c "import torch, deepspeed; assert torch.__version__.split('+')[0] == '2.13.0', torch.__version__; assert deepspeed.__version__ == '0.19.8', deepspeed.__version__" \
 && ln -s /opt/venv .venv \
 && .venv/bin/python trainer/pretrain.py --help > /dev/null \
 && ds_report

# sshd for the launcher: keys only, port 2222 (so it does not clash with the host's sshd under --network host).
# Host keys are generated when a container starts, not baked into the image. sshd sessions do not see the
# image's ENV, so PATH and friends also go to /etc/environment (read by pam_env).
RUN mkdir -p /run/sshd /root/.ssh \
 && chmod 700 /root/.ssh \
 && rm -f /etc/ssh/ssh_host_* \
 && printf 'Port 2222\nPermitRootLogin prohibit-password\nPasswordAuthentication no\nUsePAM yes\nAcceptEnv NCCL_* TORCH_* DEEPSPEED_* PYTHON*\n' \
        > /etc/ssh/sshd_config.d/spanprep.conf \
 && printf 'Host *\n    StrictHostKeyChecking accept-new\n' > /etc/ssh/ssh_config.d/spanprep.conf \
 && printf 'PATH=%s\nCUDA_HOME=%s\nTORCH_EXTENSIONS_DIR=%s\nPYTHONUNBUFFERED=1\nLD_LIBRARY_PATH=%s\n' \
        "$PATH" "$CUDA_HOME" "$TORCH_EXTENSIONS_DIR" "${LD_LIBRARY_PATH:-}" >> /etc/environment

EXPOSE 2222
CMD ["bash", "-c", "ssh-keygen -A && exec /usr/sbin/sshd -D -e"]
