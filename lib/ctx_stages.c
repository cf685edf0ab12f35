/* ctx_stages: the stages and segments of a context from the homes of its parts (see ctx_stages.h). */
#include "ctx_stages.h"

#include <string.h>

/* The stage of home, added (with an empty layer range at il) when it is new. */
static int32_t ctx_stages_of(struct ctx_stages *s, int32_t home, int32_t il) {
    for (int32_t i = 0; i < s->n_st; i++)
        if (s->st[i].home == home) return i;
    s->st[s->n_st] = (struct ctx_stage_desc){.home = home, .il0 = il, .il1 = il};
    return s->n_st++;
}

static void ctx_stages_seg(struct ctx_stages *s, int32_t stage, int32_t il0, int32_t il1, int embeds, int heads) {
    s->seg[s->n_seg++] = (struct ctx_seg_desc){.stage = stage, .il0 = il0, .il1 = il1, .embeds = embeds, .heads = heads};
}

infer_status ctx_stages_make(const struct infer_model *m, const int32_t *layer_home, int32_t embd_home,
                             int32_t head_home, int embd_head, const uint8_t *exps_host, struct ctx_stages *out) {
    const int32_t n_layer = (int32_t)m->hp.n_layer, n_all = (int32_t)m->hp.n_layer_all;
    struct ctx_stages *s = out;
    memset(s, 0, sizeof *s);
    if (embd_home != layer_home[0]) ctx_stages_seg(s, ctx_stages_of(s, embd_home, 0), 0, 0, 1, 0);
    for (int32_t il = 0; il < n_layer;) {
        int32_t end = il + 1;
        while (end < n_layer && layer_home[end] == layer_home[il]) end++;
        const int32_t k = ctx_stages_of(s, layer_home[il], il);
        if (s->st[k].il1 != il && s->st[k].il0 != s->st[k].il1)
            return infer_fail(INFER_E_ARG, "context: the layers of one home are not contiguous (layer %d)", il);
        if (s->st[k].il0 == s->st[k].il1) s->st[k].il0 = il;
        s->st[k].il1 = end;
        ctx_stages_seg(s, k, il, end, s->n_seg == 0, 0);
        il = end;
    }
    const int32_t k_head = ctx_stages_of(s, head_home, n_layer);
    if (s->seg[s->n_seg - 1].stage == k_head)
        s->seg[s->n_seg - 1].heads = 1;
    else
        ctx_stages_seg(s, k_head, n_layer, n_layer, 0, 1);
    s->st[k_head].heads = 1;
    s->st[k_head].embd_away = head_home != CTX_HOST && embd_home != head_home && n_all > n_layer &&
                              !m->layers[n_layer].nextn_embed_tokens && !embd_head;
    for (int32_t k = 0; k < s->n_st; k++) {
        struct ctx_stage_desc *d = &s->st[k];
        d->x_host = d->home != CTX_HOST && s->n_seg > 1;
        for (int32_t il = 0; exps_host && d->home != CTX_HOST && il < n_all; il++)
            d->exps_host |= exps_host[il] && m->layers[il].ffn_gate_exps &&
                            ((il >= d->il0 && il < d->il1) || (il >= n_layer && d->heads));
    }
    return INFER_OK;
}
