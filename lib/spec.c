/* spec: MTP speculative decoding — draft with the model's MTP head, verify with one batched forward
 * pass of the model, accept, roll back (include/infer.h infer_spec_step).
 *
 * One step for a sequence of length n whose sampled token `last` is not decoded yet:
 *   draft    MTP(last at n, h_{n-1}) -> d_0;  MTP(d_j at n+j+1, y_j) -> d_{j+1}   (y: the MTP's own output)
 *   verify   decode [last, d_0..d_{k-1}] at n..n+k with logits for every row; infer_decode also runs
 *            the MTP block over the batch with the target's hidden states, so its cells hold the values
 *            a non-speculative run would give them
 *   accept   greedy: d_i while it is what the sampler picks from row i; then the sampler's own token.
 *            temp > 0: rejection sampling (Leviathan et al. 2023, Chen et al. 2023): d_i ~ q_i is kept
 *            with probability min(1, p_i(d_i) / q_i(d_i)); on rejection the token is drawn from
 *            norm(max(0, p_i - q_i)); after k acceptances one more from p_k. The output then has
 *            exactly the distribution p of the sampler on the target's logits.
 *   rollback truncate the sequence to n + (tokens emitted): KV cells past it are dropped, the recurrent
 *            state and the last hidden state come back from the snapshot ring (cache.c).
 * The target rows (p) come from the same sampler chain as plain decoding, with the accepted tokens
 * recorded in order, so penalties see exactly what they would without speculation.
 * Where temp > 0 runs: on a device whose sampler chain fits lists (sampler_lists_ok: a top-k the sample op's
 * candidates hold), SPEC_LISTS: the host draws the step's 3 n_draft + 1 uniforms up front and uploads them once;
 * each draft step's sample op draws d_j with u_j and leaves q_j as a list on the device; after the verification
 * batch one sample op lists p_0..p_k (and draws from each with its residual uniform) and spec_accept decides
 * (kernels.h spec_accept_args): k + 2 ints come back, never a row of logits. Elsewhere (the CPU, other chains)
 * SPEC_HOST brings each row to the host and decides there with spec_accept() below.
 * Penalties: the drafts are proposed without them (q may be any distribution: the rule keeps p exact; greedy
 * acceptance compares with p's argmax), and verification row i is penalised by the window after d_0 .. d_{i-1}
 * (sampler_rows_penalties: the window's pairs, the drafts on the device as pushes, the tokens they move out), which
 * is the window plain decoding would hold at that row had it emitted those drafts.
 * Where the drafts live: on a one-stage device context or a tensor-parallel group in this process (spec_resident:
 * greedy, or SPEC_LISTS) they never leave the device: the verification batch copies its ids from draft_tok there
 * and spec_accept (greedy: its compare of the rows' argmaxes with the drafts) sends back only the emitted ids.
 * Elsewhere (a split over stages) they come down after drafting and the batch uploads them.
 */
#include <string.h>

#include "forward.h"
#include "sampler.h"
#include "spec.h"

/* How a step drafts and accepts (see the header). */
enum spec_mode { SPEC_HOST, SPEC_GREEDY, SPEC_LISTS };

static enum spec_mode spec_mode_of(const infer_ctx *h, const infer_sampler *s) {
    if (sampler_is_greedy(s)) return SPEC_GREEDY;
    const struct infer_backend_ops *o = h->be->ops;
    if (h->on_device && h->spec_lists && o->sample && o->spec_accept && sampler_lists_ok(s)) return SPEC_LISTS;
    return SPEC_HOST;
}

/* spec_accept decides on the head stage's device: SPEC_LISTS, or greedy where that stage is on a device with the op
 * and is not a group across processes (whose rows are not gathered: infer_sample takes each rank's pick instead).
 * The k + 2 ints of the verdict come back, never a row. */
static int spec_accept_on_device(const infer_ctx *c, enum spec_mode mode) {
    const infer_ctx *h = forward_head_stage(c);
    if (mode == SPEC_LISTS) return 1;
    return mode == SPEC_GREEDY && !c->tp_msg_host && h->on_device && h->spec_ints && h->be->ops->spec_accept;
}

/* The drafts stay on the device (spec_accept_on_device, and one stage): the verification batch reads its ids from
 * draft_tok (context.c dev_tokens). A tensor-parallel group in this process counts as one stage: its rank 0 drafts,
 * looks the batch's tokens up and holds the gathered rows. Elsewhere the k drafts come down for the batch, which
 * uploads them to the first stage (a split's stages hand over through host memory). */
static int spec_resident(const infer_ctx *c, enum spec_mode mode) {
    return spec_accept_on_device(c, mode) && c->n_seg == 1 && !c->tp_msg_host;
}

int32_t spec_accept(infer_sampler *s, const float *p, const float *q, int32_t d, float *resid, int *accepted) {
    const int32_t n_vocab = sampler_vocab(s);
    const double pd = p[d], qd = q[d];
    if (qd > 0 && sampler_uniform(s) * qd < pd) {
        *accepted = 1;
        return d;
    }
    *accepted = 0;
    double total = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        const float r = p[i] - q[i];
        resid[i] = r > 0 ? r : 0;
        total += resid[i];
    }
    if (total <= 0) return sampler_draw(s, p, 1.0); /* p == q up to rounding: p itself */
    return sampler_draw(s, resid, total);
}

/* The sample op's arguments for a greedy draft: the argmax of an MTP row (ties to the lowest id), no penalties. */
static struct sample_args spec_argmax_args(const infer_ctx *h, const float *row, int32_t *out) {
    const int32_t n_vocab = (int32_t)h->m->hp.n_vocab;
    return (struct sample_args){.logits = row, .stride = n_vocab, .n_rows = 1, .n_vocab = n_vocab,
                                .repeat_penalty = 1.0f, .top_p = 1.0f, .temp = 0.0f, .out = out,
                                .scratch = h->draft_scratch};
}

/* One draft step on h: the MTP block over the previous draft (draft_tok + j) and hin, its row of logits, and the
 * draft into draft_tok + j + 1: greedy, the row's argmax; SPEC_LISTS, s's draw with u_j, and q_j's list. Queued
 * through run(), so a device replays it as a graph (forward_mtp_graph_key): every argument is fixed by (j, mode,
 * seq, s's chain), the position is read from h->dpos and u_j from h->spec_u. */
struct spec_draft_job {
    infer_ctx *h;
    const infer_sampler *s;
    int32_t j, seq;
    const float *hin;
    float *row;
    enum spec_mode mode;
};
static infer_status spec_draft_body(void *arg) {
    infer_status st = INFER_OK;
    const struct spec_draft_job *q = arg;
    infer_ctx *h = q->h;
    if (h->tp_n > 0) /* every rank runs its part of the block; the row is gathered into rank 0's (h's) memory */
        TRY(forward_tp_mtp(h, h->draft_tok + q->j, 1, q->j ? FORWARD_MTP_H_DRAFT : FORWARD_MTP_H_CACHE, q->seq, q->row));
    else
        TRY(layer_mtp(h, h->draft_tok + q->j, q->hin, 1, q->row));
    if (q->mode == SPEC_GREEDY) {
        const struct sample_args a = spec_argmax_args(h, q->row, h->draft_tok + q->j + 1);
        TRY(h->be->ops->sample(h->be, &a));
    } else if (q->mode == SPEC_LISTS) {
        const struct sample_args a = sampler_list_args(q->s, q->row, 1, h->spec_u + q->j, h->draft_tok + q->j + 1,
                                                       h->draft_scratch, h->spec_lists + q->j);
        TRY(h->be->ops->sample(h->be, &a));
    }
fail:
    return st;
}

/* Drafts k tokens after `last` for seq into d, on the head's stage h (where the MTP block, its cells and the hidden
 * states live). Each step's token is the next one's input in h's memory: greedy and SPEC_LISTS drafts stay there
 * (the sample op's pick), the k ids coming back at the end unless resident (d then untouched), SPEC_LISTS with the
 * step's uniforms uploaded first;
 * SPEC_HOST brings each row to the host for the sampler's chain and keeps its distribution in h->spec_q for the
 * acceptance test. */
static infer_status spec_draft(infer_ctx *c, infer_sampler *s, enum spec_mode mode, int32_t seq, int32_t last,
                               int32_t k, int resident, int32_t *d) {
    infer_status st = INFER_OK;
    infer_ctx *h = forward_head_stage(c);
    struct infer_backend *be = h->be;
    const size_t n_vocab = (size_t)h->m->hp.n_vocab;
    const int32_t n_past = c->kv->len[seq], nd = c->n_draft;
    const float *hin = kv_cache_h(h->kv, seq);
    uint64_t bus = sizeof last;
    c->n_tokens = 0; /* the scratch rows are reused: the last batch's logits are gone */
    TRY(be->ops->upload(be, h->draft_tok, &last, sizeof last));
    if (mode == SPEC_LISTS) { /* every uniform of the step, whatever it keeps: drafts, acceptances, residual draws */
        double u[3 * INFER_MAX_DRAFT + 1];
        for (int32_t i = 0; i < 3 * nd + 1; i++) u[i] = sampler_uniform(s);
        TRY(be->ops->upload(be, h->spec_u, u, (size_t)(3 * nd + 1) * sizeof *u));
        bus += (size_t)(3 * nd + 1) * sizeof *u;
    }
    for (int32_t j = 0; j < k; j++) {
        float *row = h->mtp_logits + (size_t)j * n_vocab;
        h->pos[0] = n_past + j, h->seq[0] = seq;
        if (h->tp_n > 0)
            TRY(forward_tp_positions(h, 1));
        else if (h->dpos != h->pos)
            TRY(be->ops->upload(be, h->dpos, h->pos, sizeof *h->pos));
        struct spec_draft_job job = {.h = h, .s = s, .j = j, .seq = seq, .hin = hin, .row = row, .mode = mode};
        int32_t shape[7] = {j, (int32_t)mode, seq};
        if (mode == SPEC_LISTS) sampler_chain_key(s, shape + 3);
        TRY(forward_stage_run(h, forward_mtp_graph_key(h, 0, 1, shape, 7), spec_draft_body, &job));
        hin = h->mtp_hid;
        if (h->tp_n == 0) bus += sizeof *h->pos; /* forward_tp_positions counts its own */
        if (mode != SPEC_HOST) continue;
        float *q = h->spec_q + (size_t)j * n_vocab;
        TRY(be->ops->download(be, q, row, n_vocab * sizeof(float)));
        sampler_probs(s, q, h->spec_p); /* q_j, kept for the acceptance test */
        memcpy(q, h->spec_p, n_vocab * sizeof(float));
        d[j] = sampler_draw(s, q, 1.0);
        TRY(be->ops->upload(be, h->draft_tok + j + 1, d + j, sizeof *d));
        bus += n_vocab * sizeof(float) + sizeof *d;
    }
    if (mode != SPEC_HOST && !resident) {
        TRY(be->ops->download(be, d, h->draft_tok + 1, (size_t)k * sizeof *d));
        bus += (size_t)k * sizeof *d;
        for (int32_t j = 0; j < k; j++)
            if (d[j] < 0 || d[j] >= (int32_t)n_vocab)
                return infer_fail(INFER_E_DEVICE, "infer_spec_step: the %s backend drafted token %d: expected 0..%d",
                                  be->ops->name, d[j], (int32_t)n_vocab - 1);
    }
    TRY(be->ops->sync(be));
    if (h->on_device) h->bus_bytes += bus;
fail:
    return st;
}

/* spec_accept's verdict on the head's stage h (k + 2 ints) into out (the n emitted tokens, each recorded in s), checked:
 * a count in 1..k + 1, ids in the vocabulary, and (tok not NULL: the drafts on the host) each kept draft its own. */
static infer_status spec_accept_fetch(infer_ctx *c, infer_sampler *s, int32_t k, const int32_t *tok, int32_t *out,
                                      int32_t *n) {
    infer_status st = INFER_OK;
    infer_ctx *h = forward_head_stage(c);
    struct infer_backend *be = h->be;
    const int32_t n_vocab = (int32_t)c->m->hp.n_vocab;
    int32_t got[INFER_MAX_DRAFT + 2];
    TRY(be->ops->download(be, got, h->spec_ints + c->n_draft + 1, (size_t)(k + 2) * sizeof *got));
    TRY(be->ops->sync(be));
    h->bus_bytes += (size_t)(k + 2) * sizeof *got;
    if (got[0] < 1 || got[0] > k + 1)
        return infer_fail(INFER_E_DEVICE, "infer_spec_step: the %s backend accepted %d tokens: expected 1..%d",
                          be->ops->name, got[0], k + 1);
    for (int32_t i = 0; i < got[0]; i++) {
        const int32_t t = got[1 + i];
        if (t < 0 || t >= n_vocab || (tok && i + 1 < got[0] && t != tok[i + 1]))
            return infer_fail(INFER_E_DEVICE, "infer_spec_step: the %s backend emitted token %d at %d: expected %s",
                              be->ops->name, t, i, t < 0 || t >= n_vocab ? "an id in the vocabulary" : "the draft it kept");
        out[i] = t;
        infer_sampler_accept(s, t);
    }
    *n = got[0];
fail:
    return st;
}

/* The verification batch's k + 1 rows of logits in the head stage's memory, one block from *rows (a tensor-parallel
 * group's gathered into rank 0's first). */
static infer_status spec_rows(infer_ctx *c, int32_t k, const float **rows) {
    infer_status st = INFER_OK;
    TRY(forward_tp_gather(c)); /* nothing outside a group */
    for (int32_t i = 1; i <= k; i++)
        if (c->out_row[i] != c->out_row[0] + i)
            return infer_fail(INFER_E_DEVICE, "infer_spec_step: the verification rows are not one block");
    *rows = forward_head_stage(c)->logits + (size_t)c->out_row[0] * (size_t)c->m->hp.n_vocab;
fail:
    return st;
}

/* SPEC_LISTS acceptance on the head's stage h, after the verification batch of k + 1 rows: the rows' lists and
 * draws in one sample op, spec_accept, and its k + 2 ints back. out gets the n emitted tokens, each recorded in s. */
static infer_status spec_accept_lists(infer_ctx *c, infer_sampler *s, int32_t k, int32_t force, const int32_t *tok,
                                      int32_t *out, int32_t *n) {
    infer_status st = INFER_OK;
    infer_ctx *h = forward_head_stage(c);
    struct infer_backend *be = h->be;
    const int32_t nd = c->n_draft;
    const float *rows = NULL;
    TRY(spec_rows(c, k, &rows));
    struct sample_args a = sampler_list_args(s, rows, k + 1, h->spec_u + 2 * nd, h->spec_ints, h->spec_scratch,
                                             h->spec_lists + nd);
    TRY(sampler_rows_penalties(h, s, k + 1, h->draft_tok + 1, &a)); /* row i's window holds d_0 .. d_{i-1} */
    TRY(be->ops->sample(be, &a));
    const struct spec_accept_args sa = {.target = h->spec_lists + nd, .draft = h->spec_lists, .drafts = h->draft_tok + 1,
                                        .p_draw = h->spec_ints, .u_acc = h->spec_u + nd, .u_res = h->spec_u + 2 * nd,
                                        .k = k, .force = force, .out = h->spec_ints + nd + 1};
    TRY(be->ops->spec_accept(be, &sa));
    TRY(spec_accept_fetch(c, s, k, tok, out, n));
fail:
    return st;
}

/* Greedy acceptance on the head's stage h, the drafts in its draft_tok: one sample op picks every verification row's
 * argmax (each row penalised by its own window), spec_accept compares them with the drafts, and the emitted ids come
 * back (checked against tok, the drafts on the host, unless NULL: resident). */
static infer_status spec_accept_greedy_dev(infer_ctx *c, infer_sampler *s, int32_t k, int32_t force, const int32_t *tok,
                                           int32_t *out, int32_t *n) {
    infer_status st = INFER_OK;
    infer_ctx *h = forward_head_stage(c);
    struct infer_backend *be = h->be;
    const int32_t nd = c->n_draft;
    const float *rows = NULL;
    TRY(spec_rows(c, k, &rows));
    struct sample_args a = spec_argmax_args(h, rows, h->spec_ints);
    a.n_rows = k + 1;
    a.scratch = h->spec_scratch;
    TRY(sampler_rows_penalties(h, s, k + 1, h->draft_tok + 1, &a)); /* row i's window holds d_0 .. d_{i-1} */
    TRY(be->ops->sample(be, &a));
    const struct spec_accept_args sa = {.drafts = h->draft_tok + 1, .p_draw = h->spec_ints, .k = k, .force = force,
                                        .out = h->spec_ints + nd + 1};
    TRY(be->ops->spec_accept(be, &sa));
    TRY(spec_accept_fetch(c, s, k, tok, out, n));
fail:
    return st;
}

infer_status infer_spec_step(infer_ctx *c, infer_sampler *s, int32_t seq, int32_t last, int32_t *out, int32_t cap,
                             int32_t *n_out) {
    infer_status st = INFER_OK;
    if (n_out) *n_out = 0;
    if (!c || !s || !out || !n_out)
        return infer_fail(INFER_E_ARG, "infer_spec_step: %s is NULL", !c ? "context" : !s ? "sampler" : "out");
    if (c->n_draft < 1)
        return infer_fail(INFER_E_ARG, "infer_spec_step: the context was created with n_draft 0");
    if (seq < 0 || seq >= c->n_seq)
        return infer_fail(INFER_E_ARG, "infer_spec_step: sequence %d: expected 0..%d", seq, c->n_seq - 1);
    const int32_t n_vocab = (int32_t)c->m->hp.n_vocab;
    if (sampler_vocab(s) != n_vocab)
        return infer_fail(INFER_E_ARG, "infer_spec_step: the sampler has %d tokens, the model %d",
                          sampler_vocab(s), n_vocab);
    if (cap < c->n_draft + 1)
        return infer_fail(INFER_E_ARG, "infer_spec_step: cap %d: expected at least n_draft + 1 = %d", cap,
                          c->n_draft + 1);
    if (last < 0 || last >= n_vocab)
        return infer_fail(INFER_E_ARG, "infer_spec_step: last token %d: expected an id in 0..%d", last, n_vocab - 1);
    const int32_t n_past = c->kv->len[seq];
    if (n_past < 1)
        return infer_fail(INFER_E_ARG, "infer_spec_step: sequence %d is empty: decode the prompt first", seq);
    if (n_past >= c->n_ctx)
        return infer_fail(INFER_E_CTX_FULL, "infer_spec_step: sequence %d holds n_ctx (%d) positions", seq, c->n_ctx);
    int32_t k = c->n_draft;
    if (k > c->n_ctx - 1 - n_past) k = c->n_ctx - 1 - n_past;
    if (k > c->n_batch - 1) k = c->n_batch - 1;

    int32_t tok[INFER_MAX_DRAFT + 1], seqs[INFER_MAX_DRAFT + 1];
    int8_t want[INFER_MAX_DRAFT + 1];
    tok[0] = last;
    const enum spec_mode mode = spec_mode_of(forward_head_stage(c), s);
    const int resident = spec_resident(c, mode);
    TRY(spec_draft(c, s, mode, seq, last, k, resident, tok + 1));
    for (int32_t i = 0; i <= k; i++) seqs[i] = seq, want[i] = 1;
    if (resident) { /* the batch's ids are draft_tok's [last, d_0 ..]: the host's copy only passes validation */
        for (int32_t i = 1; i <= k; i++) tok[i] = 0;
        c->dev_tokens = forward_head_stage(c)->draft_tok;
    }
    infer_batch b = {k + 1, tok, NULL, seqs, want};
    TRY(infer_decode(c, &b));

    int32_t n = 0;
    const int greedy = mode == SPEC_GREEDY;
    const int32_t force = c->spec_force < k ? c->spec_force : k;
    c->spec_force = -1; /* the hook holds for one step */
    infer_ctx *h = forward_head_stage(c); /* the drafts' distributions and the acceptance's rows */
    const int on_device = spec_accept_on_device(c, mode);
    if (on_device && greedy) TRY(spec_accept_greedy_dev(c, s, k, force, resident ? NULL : tok, out, &n));
    if (mode == SPEC_LISTS) TRY(spec_accept_lists(c, s, k, force, resident ? NULL : tok, out, &n));
    for (int32_t i = 0; i <= k && !on_device; i++) { /* the host decides: the CPU, a group across processes */
        int32_t t;
        int accepted = 0;
        if (i < force) { /* test hook: kept whatever the rule says */
            t = tok[i + 1], accepted = 1;
            infer_sampler_accept(s, t);
        } else if (greedy) {
            TRY(infer_sample(c, s, i, &t)); /* where the logits are; records t */
            accepted = i < k && t == tok[i + 1];
        } else {
            const float *logits = infer_logits(c, i);
            if (!logits) return infer_fail(INFER_E_DEVICE, "infer_spec_step: row %d's logits: %s", i, infer_last_error());
            sampler_probs(s, logits, h->spec_p);
            if (i < k) {
                t = spec_accept(s, h->spec_p, h->spec_q + (size_t)i * n_vocab, tok[i + 1], h->spec_r, &accepted);
            } else {
                t = sampler_draw(s, h->spec_p, 1.0);
            }
            infer_sampler_accept(s, t);
        }
        if (i == force) accepted = 0;
        out[n++] = t;
        if (!accepted) break;
    }
    for (infer_ctx *stage = c; stage; stage = stage->next_stage) /* every stage of a split rolls back */
        TRY(kv_cache_truncate(stage->kv, seq, n_past + n));
    c->n_tokens = 0; /* the verify rows past the accepted ones no longer match the caches */
    c->spec_kept = n, c->spec_drafts = k;
    c->spec_drafts_dev = resident; /* spec_last_drafts reads them from draft_tok */
    memcpy(c->spec_draft_ids, tok + 1, (size_t)k * sizeof *tok);
    c->spec_steps++, c->spec_drafted += k, c->spec_accepted += n - 1;
    *n_out = n;
fail:
    return st;
}

infer_spec_stats infer_spec_get_stats(const infer_ctx *c) {
    infer_spec_stats r = {0, 0, 0};
    if (c) r.n_steps = c->spec_steps, r.n_drafted = c->spec_drafted, r.n_accepted = c->spec_accepted;
    return r;
}

infer_status spec_mtp_eval(infer_ctx *c, int32_t seq, int32_t pos0, const int32_t *tokens, const float *h, int32_t n,
                           float *out) {
    if (!c || !tokens || !h || !out || c->n_draft < 1 || c->n_seg != 1 || c->on_device || seq < 0 || seq >= c->n_seq ||
        n < 1 || n > c->n_batch || pos0 < 0 || pos0 > c->kv->mtp_len[seq] || pos0 + n > c->n_ctx)
        return infer_fail(INFER_E_ARG, "spec_mtp_eval: seq %d pos0 %d n %d: expected a drafting context on the CPU, "
                          "pos0 within the MTP cells held and n tokens that fit n_batch and n_ctx", seq, pos0, n);
    c->n_tokens = 0;
    for (int32_t i = 0; i < n; i++) c->pos[i] = pos0 + i, c->seq[i] = seq;
    return layer_mtp(c, tokens, h, n, out);
}

const float *spec_hidden(const infer_ctx *c) { return c && c->n_draft && !c->on_device ? c->hid : NULL; }

void spec_force_accept(infer_ctx *c, int32_t n) {
    if (c) c->spec_force = n < 0 ? -1 : n;
}

const float *spec_verify_logits(const infer_ctx *c, int32_t i) {
    if (!c || forward_head_stage(c)->on_device || i < 0 || i >= c->spec_kept) return NULL;
    return forward_head_stage(c)->logits + (size_t)i * (size_t)c->m->hp.n_vocab;
}

int32_t spec_last_drafts(const infer_ctx *c, int32_t *ids) {
    if (!c) return 0;
    if (c->spec_drafts_dev) { /* still in the head stage's draft_tok until the next step */
        struct infer_ctx *h = forward_head_stage(c);
        if (h->be->ops->download(h->be, ids, h->draft_tok + 1, (size_t)c->spec_drafts * sizeof *ids) != INFER_OK ||
            h->be->ops->sync(h->be) != INFER_OK)
            return 0;
        return c->spec_drafts;
    }
    memcpy(ids, c->spec_draft_ids, (size_t)c->spec_drafts * sizeof *ids);
    return c->spec_drafts;
}

const float *spec_draft_logits(const infer_ctx *c, int32_t j) {
    const infer_ctx *h = c ? forward_head_stage(c) : NULL;
    if (!h || h->on_device || j < 0 || j >= c->spec_drafts) return NULL;
    return h->mtp_logits + (size_t)j * (size_t)c->m->hp.n_vocab;
}
