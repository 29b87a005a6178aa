# venv-common.sh - what every peer environment's setup script does the same
# way (setup-venv*.sh source it): the environment's folder and a refusal of a
# dangling link there, the interpreter that makes it, and the closing line.
# Not run by itself; bash only.

# venv_begin NAME DEFAULT_DIR [DIR]: sets dir (DIR, else DEFAULT_DIR) and
# python ($PYTHON, else python3); exit 2 with a message naming NAME when dir
# is a link to nothing or python cannot make a venv.
venv_begin() {
    venv_name=$1
    dir=${3:-$2}
    if [ -L "$dir" ] && [ ! -e "$dir" ]; then # venv would say only "File exists"
        echo "$venv_name: $dir is a link to $(readlink "$dir"), which does not exist: remove the link (rm '$dir') or make its target" >&2
        exit 2
    fi
    python=${PYTHON:-python3}
    if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
        echo "$venv_name: $python lacks venv/ensurepip (Debian: apt-get install python3-venv)" >&2
        exit 2
    fi
}

# venv_done DEFAULT_DIR VARIABLE: says how mhabench finds $dir (by itself
# where it is DEFAULT_DIR, else through VARIABLE).
venv_done() {
    if [ "$dir" = "$1" ]; then
        echo "$venv_name: done; mhabench finds $dir by itself"
    else
        echo "$venv_name: done; use it with: export $2=$dir/bin/python3"
    fi
}
