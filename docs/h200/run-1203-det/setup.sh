# sourced at the start of every device call (ignored; travels with carry)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
export LUCERNA_CACHE_DIR=$PWD/build/devcache LUCERNA_BACKEND=cuda
export M=$PWD/build/devmodels
mkdir -p $M
