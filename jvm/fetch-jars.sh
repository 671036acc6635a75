#!/usr/bin/env bash
# Fetch the Delta Lake JVM jars for the local Spark session of the tests (and of a developer) with mvn,
# from Maven Central, into jvm/jars (ignored by git; never committed). Nothing in queuelake downloads
# jars at run time: tests/conftest.py puts what is here on the session's classpath (spark.jars).
#
#   bash jvm/fetch-jars.sh [OUTPUT_DIR]          default: jvm/jars beside this script
#   bash jvm/fetch-jars.sh --s3 [OUTPUT_DIR]     default: jvm/jars/s3
#
# --s3 fetches hadoop-aws (the Hadoop version of pyspark's own hadoop-client jars) and the AWS SDK v2
# bundle it needs, for s3a:// lake roots on Spark (pom.xml profile s3). Opt-in and in its own folder:
# the bundle is ~640 MB, and jars on spark.jars are copied into every local session's work folder, so
# tests/helpers/s3.py puts these on the driver class path instead (and skips without them).
#
# Idempotent: when OUTPUT_DIR holds a complete fetch for the current pom.xml it returns at once,
# without starting mvn. A fetch goes to a temporary folder first and replaces OUTPUT_DIR only when
# complete, so an interrupted run never leaves half a classpath (the Delta fetch keeps an s3 subfolder).
# Exits non-zero, saying why, when mvn is missing or fails.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
pom="$here/pom.xml"
if [[ "${1:-}" == "--s3" ]]; then
  shift
  what="hadoop-aws"
  out="${1:-$here/jars/s3}"
  key_jar="hadoop-aws-*.jar"
  mvn_args=(-Ps3 -DincludeArtifactIds=hadoop-aws,bundle)
else
  what="Delta"
  out="${1:-$here/jars}"
  key_jar="delta-spark_*.jar"
  mvn_args=()
fi
stamp_name=".pom.sha256"
want="$(sha256sum "$pom" | cut -d' ' -f1)"

if [[ -f "$out/$stamp_name" && "$(cat "$out/$stamp_name")" == "$want" ]] && compgen -G "$out/$key_jar" >/dev/null; then
  echo "fetch-jars: $what jars up to date in $out" >&2
  exit 0
fi

if ! command -v mvn >/dev/null 2>&1; then
  echo "fetch-jars: mvn not found on PATH; install Maven (e.g. apt-get install maven) to fetch the Delta jars" >&2
  exit 2
fi

mkdir -p "$(dirname "${out%/}")"
tmp="$(mktemp -d "${out%/}.tmp.XXXXXX")"
log="$tmp.log"
trap 'rm -rf "$tmp" "$log"' EXIT

echo "fetch-jars: resolving the $what jars with mvn ($pom)" >&2
if ! mvn -B -q --no-transfer-progress -f "$pom" dependency:copy-dependencies \
      -DoutputDirectory="$tmp" -DincludeScope=runtime "${mvn_args[@]}" >"$log" 2>&1; then
  echo "fetch-jars: mvn failed to resolve the $what jars (Maven Central reachable? versions in jvm/pom.xml served?):" >&2
  grep -E 'ERROR|Could not|Failed' "$log" | head -n 20 >&2 || tail -n 20 "$log" >&2
  exit 1
fi
if ! compgen -G "$tmp/$key_jar" >/dev/null; then
  echo "fetch-jars: mvn succeeded but no $key_jar was copied to $tmp" >&2
  exit 1
fi

echo "$want" >"$tmp/$stamp_name"
if [[ "$what" == "Delta" && -d "$out/s3" ]]; then
  mv "$out/s3" "$tmp/s3"  # the opt-in hadoop-aws fetch lives inside; keep it
fi
rm -rf "$out"
mv "$tmp" "$out"
echo "fetch-jars: $(ls "$out"/*.jar | wc -l) jars in $out" >&2
