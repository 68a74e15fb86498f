#!/usr/bin/env bash
# TLS from the manifest: `tokenhost check` refuses certificate files that cannot serve, naming them;
# `serve` speaks HTTPS on both ports; `tokenhost admin` and `tokenhost bench` reach it with --cacert
# (and are told how when they do not trust it); curl over https gets a completion; plain HTTP on a TLS
# port is told to use https.
set -euo pipefail
tokenhost=$1 here=$2
source "$here/lib.sh"

# Throwaway certificates, made here: no key material lives in the tree.
cert() {  # cert NAME: $work/NAME.crt and $work/NAME.key for localhost and 127.0.0.1
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj "/CN=$1" \
    -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout "$work/$1.key" -out "$work/$1.crt" 2>/dev/null
}
cert server
cert other

manifest() {  # manifest CERT KEY > FILE: the default manifest with TLS on both ports
  sed -e "s|^log_level = .*|log_level = \"info\"\ntls_certificate = \"$1\"\ntls_private_key = \"$2\"\nadmin_tls_certificate = \"$1\"\nadmin_tls_private_key = \"$2\"|" \
    "$here/../../manifests/default.toml"
}

manifest "$work/server.crt" "$work/other.key" > "$work/mismatch.toml"
if out=$("$tokenhost" --log-level warn check --no-load "$work/mismatch.toml" 2>&1); then echo "FAIL: check took a key of another certificate"; exit 1; fi
grep -q "TLS of the gateway: TLS private key $work/other.key is not the key of the certificate in $work/server.crt" <<<"$out" ||
  { echo "FAIL: check said: $out"; exit 1; }
echo "ok: check refuses a key that is not the certificate's"
echo "not a certificate" > "$work/junk.crt"
manifest "$work/junk.crt" "$work/server.key" > "$work/junk.toml"
if out=$("$tokenhost" --log-level warn check --no-load "$work/junk.toml" 2>&1); then echo "FAIL: check took a junk certificate"; exit 1; fi
grep -q "TLS certificate $work/junk.crt: .*expected a readable PEM certificate chain" <<<"$out" || { echo "FAIL: check said: $out"; exit 1; }
echo "ok: check refuses a file that is not a certificate"

manifest "$work/server.crt" "$work/server.key" > "$work/tls.toml"
"$tokenhost" --log-level warn check --no-load "$work/tls.toml" > /dev/null
start_server "$tokenhost" "$work/tls.toml"
grep -q "both speak HTTPS" "$work/log" || { echo "FAIL: the log does not say TLS"; cat "$work/log"; exit 1; }
admin=${admin/http:/https:}

curl -sf --cacert "$work/server.crt" "https://127.0.0.1:$gw/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "Once upon a time", "max_tokens": 8}' > "$work/completion.json"
grep -q '"completion_tokens": *8' "$work/completion.json" || { echo "FAIL: completion over https:"; cat "$work/completion.json"; exit 1; }
echo "ok: a completion over https"
curl -s "http://127.0.0.1:$gw/v1/models" > "$work/plain.json" || true
grep -q "this port speaks HTTPS" "$work/plain.json" || { echo "FAIL: plain HTTP on the TLS port got:"; cat "$work/plain.json"; exit 1; }
echo "ok: plain HTTP is told to use https"

admin_ok "engine main" --cacert "$work/server.crt" status
admin_ok "engine main" --insecure status
if "$tokenhost" admin --url "$admin" --cacert "$work/other.crt" status > "$work/out" 2>&1; then echo "FAIL: admin trusted another certificate"; exit 1; fi
grep -q "certificate verify failed.*--cacert FILE trusts the server's certificate" "$work/out" || { echo "FAIL: admin said:"; cat "$work/out"; exit 1; }
echo "ok: admin with the wrong CA is told how to trust"

"$tokenhost" bench --url "https://127.0.0.1:$gw" --cacert "$work/server.crt" --requests 4 --concurrency 2 --output-tokens 4 --quiet
echo "ok: bench over https"
