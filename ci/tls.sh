# The TLS material of the test servers, made afresh at each start: a CA
# (ca.pem), a certificate for the servers signed by it (server.pem, for
# the names given; the Redis servers also show it as a client, to each
# other), a client certificate signed by it (client.pem), and an unrelated
# CA (other-ca.pem).  EC P-256 keys, mode 600: the whole set takes ~50 ms.
# Sourced by ci/servers/redis.sh and ci/servers/postgres.sh:
#
#   dlock_tls_make DIR SAN   make the set in DIR; SAN is the server
#                            certificate's subjectAltName ("DNS:localhost, IP:127.0.0.1")

dlock_tls_make() {
	local t=$1 san=$2
	mkdir -p "$t" || return 1
	cat >"$t/openssl.cnf" <<-EOF
		[req]
		distinguished_name = dn
		prompt = no
		[dn]
		[ca]
		basicConstraints = critical, CA:TRUE
		keyUsage = critical, keyCertSign, cRLSign
		subjectKeyIdentifier = hash
		[server]
		basicConstraints = critical, CA:FALSE
		keyUsage = critical, digitalSignature
		extendedKeyUsage = serverAuth, clientAuth
		subjectAltName = $san
		authorityKeyIdentifier = keyid
		[client]
		basicConstraints = critical, CA:FALSE
		keyUsage = critical, digitalSignature
		extendedKeyUsage = clientAuth
		authorityKeyIdentifier = keyid
	EOF
	if ! (
		umask 077
		cd "$t" || exit 1
		dlock_tls_ca ca "dlock test CA" &&
			dlock_tls_ca other-ca "dlock unrelated CA" &&
			dlock_tls_cert server localhost &&
			dlock_tls_cert client "dlock test client"
	) 2>"$t/openssl.log"; then
		echo "could not make the TLS material in $t:" >&2
		cat "$t/openssl.log" >&2
		return 1
	fi
	chmod 644 "$t"/*.pem
	rm -f "$t"/*.csr "$t/openssl.log"
}

dlock_tls_ca() {
	openssl req -config openssl.cnf -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
		-nodes -keyout "$1.key" -out "$1.pem" -days 30 -subj "/CN=$2" -extensions ca
}

# A key and a certificate signed by ca.pem, with the extensions of the
# section of openssl.cnf named like the file.
dlock_tls_cert() {
	openssl req -config openssl.cnf -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
		-nodes -keyout "$1.key" -out "$1.csr" -subj "/CN=$2" &&
		openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -days 30 \
			-set_serial "0x$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')" \
			-extfile openssl.cnf -extensions "$1" -out "$1.pem"
}
