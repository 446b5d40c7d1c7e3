# A PostgreSQL server that speaks TLS only, for test_pg_tls.  Sourced by
# ci/servers/postgres.sh, whose dlock_start_postgres calls
#
#   dlock_pg_tls_start DIR   make the TLS material in DIR/tls (ci/tls.sh),
#                            start the server in DIR/tls-server, export:
#     DLOCK_TEST_PG_TLS_URI       postgres://dlock@localhost:PORT/dlock_test?sslmode=verify-full&
#                                 sslrootcert=DIR/tls/ca.pem&hostaddr=127.0.0.1
#     DLOCK_TEST_PG_TLS_PORT      its port
#     DLOCK_TEST_PG_TLS_CA        DIR/tls/ca.pem, the CA that signed its certificate
#     DLOCK_TEST_PG_TLS_OTHER_CA  DIR/tls/other-ca.pem, an unrelated CA
#   dlock_pg_tls_stop DIR
#
# Its certificate names localhost only (no IP address), so that a
# connection to 127.0.0.1 with sslmode=verify-full fails on the name,
# deterministically, while host=localhost (hostaddr=127.0.0.1: no
# resolver, no ::1) verifies.  pg_hba.conf takes TCP connections only with
# TLS (hostssl), so a connection that succeeds is a TLS one.  The data
# directory is a copy of the pair template (pair.sh): no initdb of its own.
# Only this server has TLS: the other test servers have none, so that no
# other test's connection moves onto TLS (libpq's default is prefer).

dlock_pg_tls_start() {
	local dir=$1 t=$1/tls-server port
	dlock_tls_make "$dir/tls" "DNS:localhost" || return 1
	chown postgres: "$dir/tls/server.key"
	(
		flock 9 || exit 1
		dlock_pg_pair_template "$dir"
	) 9>"$dir/pair-template.lock" || return 1
	mkdir -p "$t/sock"
	cp -a "$dir/pair-template/data" "$t/data" || return 1
	cat >"$t/data/pg_hba.conf" <<-EOF
		local all all trust
		hostssl all all 127.0.0.1/32 trust
	EOF
	chown -R postgres: "$t"
	dlock_free_port >"$t/port" || return 1
	port=$(cat "$t/port")
	dlock_pg_launch "$t" -c ssl=on -c "ssl_cert_file=$dir/tls/server.pem" -c "ssl_key_file=$dir/tls/server.key" ||
		return 1
	export DLOCK_TEST_PG_TLS_PORT=$port
	export DLOCK_TEST_PG_TLS_CA=$dir/tls/ca.pem
	export DLOCK_TEST_PG_TLS_OTHER_CA=$dir/tls/other-ca.pem
	export DLOCK_TEST_PG_TLS_URI="postgres://dlock@localhost:$port/dlock_test?sslmode=verify-full&sslrootcert=$DLOCK_TEST_PG_TLS_CA&hostaddr=127.0.0.1"
}

dlock_pg_tls_stop() {
	[ -d "$1/tls-server" ] && dlock_pg_halt "$1/tls-server"
	return 0
}
