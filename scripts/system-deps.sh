#!/usr/bin/env bash
# The system packages `make test` needs beyond Python and Java, installed with apt-get when missing:
#   - the ODBC driver manager and the PostgreSQL ODBC driver (psqlODBC, registered as "PostgreSQL Unicode"):
#     the tests run the transport through pyodbc as well as psycopg; FreeTDS (tdsodbc) is the SQL Server
#     driver the sqlserver examples use;
#   - Maven, when jvm/fetch-jars.sh exists: it fetches the Delta Lake JVM jars.
#
# Usage: scripts/system-deps.sh --list     prints the missing Debian packages, one per line (nothing: all there)
#        scripts/system-deps.sh --install  installs them (root and apt-get), or says what to run and stops
set -euo pipefail
cd "$(dirname "$0")/.."

odbc_packages=(unixodbc unixodbc-dev odbc-postgresql tdsodbc)

missing_packages() {
  if ! odbcinst -q -d 2>/dev/null | grep -qx '\[PostgreSQL Unicode\]'; then
    printf '%s\n' "${odbc_packages[@]}"
  fi
  if [ -f jvm/fetch-jars.sh ] && ! command -v mvn >/dev/null 2>&1; then
    echo maven
  fi
}

case "${1:---list}" in
  --list)
    missing_packages
    ;;
  --install)
    packages=($(missing_packages))  # Debian package names: no spaces
    [ "${#packages[@]}" -eq 0 ] && exit 0
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
      echo "make test needs these system packages: ${packages[*]}" >&2
      echo "  run: sudo apt-get install ${packages[*]}" >&2
      echo "  (elsewhere: unixODBC with psqlODBC registered in odbcinst.ini as 'PostgreSQL Unicode')" >&2
      exit 1
    fi
    echo "installing with apt-get: ${packages[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${packages[@]}" >/dev/null
    ;;
  *)
    echo "usage: $0 --list | --install" >&2
    exit 2
    ;;
esac
