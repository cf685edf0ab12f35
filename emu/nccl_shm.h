/* nccl_shm.h: the shared-memory segment through which the processes of one NCCL clique meet (nccl_shm.cc).
 *
 * The unique id names a POSIX shared-memory segment. The first rank to join creates it, the others map it;
 * it holds each rank's process id and current call, a barrier counted in ranks, a failure flag, and one
 * slot of SLOT_BYTES per rank through which collectives pass their data chunk by chunk. The name is removed
 * as soon as every rank has joined (each process keeps its mapping), or when a join fails, so a crash
 * leaves nothing behind in /dev/shm. Every wait here blocks without emu::big_lock (callers release it) and
 * fails with ncclRemoteError when a partner process has exited, another process gave up, or the wait
 * outlasted the clique's timeout.
 */
#ifndef INFER_EMU_NCCL_SHM_H
#define INFER_EMU_NCCL_SHM_H

#include <cstddef>
#include <cstdint>
#include <string>

#include "nccl.h"

namespace emu {

constexpr size_t SLOT_BYTES = 256 << 10; /* per rank and round: a collective moves its data in rounds of this */

/* What a rank publishes about its current collective, so that every process can check that they match. */
struct shm_call {
    uint64_t count;
    int32_t kind, type, op, root;
};

struct shm_seg; /* this process's mapping of one clique's segment */

/* Maps the segment `name` for a clique of nranks, creating it when no process has yet. timeout_s: how long
 * one wait may last (<= 0: for ever). ncclInvalidUsage: it exists for another nranks. */
ncclResult_t shm_attach(const char *name, int nranks, double timeout_s, shm_seg **out);
void shm_detach(shm_seg *s);
/* Claims `rank` for this process (ncclInvalidUsage: taken); the last rank to join removes the name. */
ncclResult_t shm_join(shm_seg *s, int rank);
ncclResult_t shm_wait_joined(shm_seg *s, std::string *why);
/* Waits until every rank has arrived; `arrivals`: how many of them this call brings. */
ncclResult_t shm_barrier(shm_seg *s, int arrivals, std::string *why);
/* Marks the clique failed (every waiting process then fails too) and removes the name. */
void shm_give_up(shm_seg *s);
shm_call *shm_call_of(shm_seg *s, int rank);
char *shm_slot(shm_seg *s, int rank);

} /* namespace emu */

#endif
