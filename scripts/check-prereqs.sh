#!/usr/bin/env bash
# Checks what `make demo` or `make test` needs before anything is installed, and names all that is
# missing at once, with how to get it. Exit 0: all there; 1: something missing.
#
# Usage: scripts/check-prereqs.sh demo|test
# Environment (the Makefile passes its own): PYTHON, the interpreter that creates the venv (python3);
# VENV, the venv folder (.venv); QUEUELAKE_MIN_FREE_GB, free disk needed in the checkout's filesystem
# (default 3 for demo, 5 for test: the venv alone takes 1.5 to 2.5 GB).
set -uo pipefail  # bash 3.2 (macOS) too: no mapfile, empty arrays guarded
cd "$(dirname "$0")/.."

purpose=${1:-demo}
case "$purpose" in demo | test) ;; *) echo "usage: $0 demo|test" >&2; exit 2 ;; esac
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
if [ "$purpose" = test ]; then default_gb=5; else default_gb=3; fi
min_free_gb=${QUEUELAKE_MIN_FREE_GB:-$default_gb}

problems=()  # what is missing, why, and how to get it
found=()     # what was checked and is fine
notes=()     # what make will do about it, or a warning

# --- Python 3.10+, able to create a venv -----------------------------------------------------------
if ! py_path=$(command -v "$PYTHON" 2>/dev/null); then
  problems+=("Python 3.10 or newer: '$PYTHON' is not on PATH. Install it (Debian/Ubuntu: apt-get install python3 python3-venv) or name another interpreter: make PYTHON=/path/to/python3.12 ...")
else
  py_version=$("$PYTHON" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null || echo "?")
  if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    problems+=("Python 3.10 or newer: $py_path is Python $py_version. Install a newer one and run make PYTHON=/path/to/python3.12 ...")
  else
    found+=("Python $py_version ($py_path)")
    if [ ! -x "$VENV/bin/python" ] && ! "$PYTHON" -c 'import venv, ensurepip' 2>/dev/null; then
      problems+=("Python's venv module with pip (ensurepip): $py_path cannot create $VENV. Debian/Ubuntu: apt-get install python3-venv (or python$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-venv)")
    fi
  fi
fi
if [ -x "$VENV/bin/python" ] && ! "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  problems+=("$VENV was made with a Python older than 3.10: remove it (make clean) and run make again")
fi

# --- Java 17 for Spark (pyspark uses JAVA_HOME when it is set, else java on PATH) ----------------------
if [ -n "${JAVA_HOME:-}" ]; then java_bin="$JAVA_HOME/bin/java"; else java_bin=$(command -v java 2>/dev/null || true); fi
if [ -z "$java_bin" ] || [ ! -x "$java_bin" ]; then
  where=${JAVA_HOME:+"JAVA_HOME=$JAVA_HOME has no bin/java"}
  problems+=("Java 17 (Spark runs on the JVM): ${where:-no java on PATH}. Debian/Ubuntu: apt-get install openjdk-17-jre-headless; macOS: brew install openjdk@17; then put its bin on PATH or set JAVA_HOME")
else
  java_version=$("$java_bin" -version 2>&1 | sed -n 's/.*version "\([^"]*\)".*/\1/p' | head -n1)
  java_major=${java_version%%[.+-]*}
  [ "$java_major" = 1 ] && java_major=$(echo "$java_version" | cut -d. -f2)  # 1.8.0_x is Java 8
  if ! [[ "$java_major" =~ ^[0-9]+$ ]]; then
    problems+=("Java 17: could not read the version of $java_bin ('$("$java_bin" -version 2>&1 | head -n1)')")
  elif [ "$java_major" -lt 17 ]; then
    problems+=("Java 17: $java_bin is Java $java_version, and Spark 4 needs 17 (or 21). Install openjdk-17-jre-headless and put it first on PATH or set JAVA_HOME")
  else
    found+=("Java $java_version ($java_bin)")
    [ "$java_major" -gt 21 ] && notes+=("warning: Spark 4 supports Java 17 and 21; Java $java_major may fail. Set JAVA_HOME to a Java 17 if Spark does not start")
  fi
fi

# --- free disk in the checkout's filesystem (the venv, the lake, Spark's scratch space) ---------------
free_kb=$(df -Pk . 2>/dev/null | awk 'NR == 2 {print $4}')
if [[ "$free_kb" =~ ^[0-9]+$ ]]; then
  free_gb=$((free_kb / 1024 / 1024))
  if [ "$free_kb" -lt $((min_free_gb * 1024 * 1024)) ]; then
    problems+=("free disk: $free_gb GB free in $(pwd)'s filesystem, make $purpose needs $min_free_gb GB (the venv takes 1.5 to 2.5 GB, plus the lake and Spark's scratch files). Free some space, or set QUEUELAKE_MIN_FREE_GB to override")
  else
    found+=("$free_gb GB free")
  fi
else
  notes+=("warning: could not read the free disk space (df)")
fi

# --- make test only: system packages (the ODBC drivers; Maven for jvm/fetch-jars.sh) -----------------
if [ "$purpose" = test ]; then
  packages=($(bash scripts/system-deps.sh --list))  # Debian package names: no spaces
  if [ "${#packages[@]}" -gt 0 ]; then
    why="the tests run the transport through pyodbc with the PostgreSQL ODBC driver ('PostgreSQL Unicode'), as well as psycopg"
    [[ " ${packages[*]} " == *" maven "* ]] && why="$why; jvm/fetch-jars.sh fetches the Delta Lake jars with Maven"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      notes+=("missing system packages, which make test installs now with apt-get: ${packages[*]} ($why)")
    else
      problems+=("system packages ${packages[*]}: $why. Install them as root: sudo apt-get install ${packages[*]} (elsewhere: unixODBC with psqlODBC registered in odbcinst.ini as 'PostgreSQL Unicode'), then run make test again")
    fi
  else
    found+=("ODBC driver 'PostgreSQL Unicode'")
  fi
fi

for note in ${notes[@]+"${notes[@]}"}; do echo "  $note" >&2; done
if [ "${#problems[@]}" -gt 0 ]; then
  echo "make $purpose cannot start; missing:" >&2
  for p in ${problems[@]+"${problems[@]}"}; do echo "  - $p" >&2; done
  exit 1
fi
joined=$(printf '%s, ' ${found[@]+"${found[@]}"})
echo "prerequisites for make $purpose: ${joined%, }" >&2
