/*
 * Loop mode of the conformance suite (DLOCK_CONFORMANCE_LOOP): the calls of
 * the test bodies and of the support files they use, renamed to the loop
 * clients of testloop.c.  Included last by testsupport.h and conformance.h
 * under that define, after dlock/dlock.h has declared the originals.
 * Not renamed: dlock_cancel() (any thread may call it), the frees of what
 * inspection answers, and the static helpers (dlock_strerror(), ...).
 */
#ifndef DLOCK_TESTLOOP_MAP_H
#define DLOCK_TESTLOOP_MAP_H

#include "testloop.h"

#define dlock_client_open testloop_client_open
#define dlock_client_close testloop_client_close
#define dlock_client_errmsg testloop_client_errmsg
#define dlock_client_uri testloop_client_uri
#define dlock_client_get_stats testloop_client_get_stats
#define dlock_client_capabilities testloop_client_capabilities
#define dlock_client_feature testloop_client_feature

#define dlock_lock_new testloop_lock_new
#define dlock_rwlock_new testloop_rwlock_new
#define dlock_semaphore_new testloop_semaphore_new
#define dlock_lock_free testloop_lock_free
#define dlock_lock_name testloop_lock_name
#define dlock_lock_get_kind testloop_lock_get_kind
#define dlock_lock_permits testloop_lock_permits
#define dlock_lock_get_permits testloop_lock_permits
#define dlock_acquire testloop_acquire
#define dlock_release testloop_release
#define dlock_extend testloop_extend
#define dlock_check testloop_check
#define dlock_lock_fencing_token testloop_lock_fencing_token
#define dlock_lock_permit_slot testloop_lock_permit_slot

#define dlock_inspect testloop_inspect
#define dlock_list testloop_list
#define dlock_break testloop_break
#define dlock_gc testloop_gc

#define dlock_election_new testloop_election_new
#define dlock_election_free testloop_election_free
#define dlock_election_lock testloop_election_lock
#define dlock_campaign testloop_campaign
#define dlock_proclaim testloop_proclaim
#define dlock_resign testloop_resign
#define dlock_election_leader testloop_election_leader
#define dlock_leader_get testloop_election_leader
#define dlock_observe testloop_observe

#endif
