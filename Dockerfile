# tilefuse on the CUDA development toolkit + Debian 12's LLVM/MLIR 19.
# Building the image runs the same set-up and test command as the README.
FROM debian:bookworm

RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates wget gnupg \
 && wget -q https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb \
 && dpkg -i cuda-keyring_1.1-1_all.deb && rm cuda-keyring_1.1-1_all.deb \
 && apt-get update && apt-get install -y --no-install-recommends cuda-toolkit-12-6 \
 && rm -rf /var/lib/apt/lists/*
ENV PATH=/usr/local/cuda/bin:${PATH}

WORKDIR /src/tilefuse
COPY . .
RUN tools/dev.sh test
CMD ["python3", "tools/demo.py"]
