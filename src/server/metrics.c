/* Prometheus text exposition (see metrics.h). */
#include "server/metrics.h"

#include <stdio.h>
#include <string.h>

static const double metrics_ttft_bounds[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                             0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
static const double metrics_itl_bounds[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                            0.3,   0.4,   0.5,  0.75,  1.0,  2.5,   5.0, 7.5,  10.0};
static const double metrics_e2e_bounds[] = {0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0,
                                            30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0};
static const char *const metrics_endpoint_names[METRICS_ENDPOINT_COUNT] = {"completions", "chat_completions",
                                                                           "other"};

static void metrics_histogram_setup(struct metrics_histogram *h, const char *name, const char *help,
                                    const double *bounds, int n)
{
    memset(h, 0, sizeof *h);
    HR_ASSERT(n <= METRICS_MAX_BUCKETS);
    h->name = name;
    h->help = help;
    h->bounds = bounds;
    h->n_bounds = n;
}

enum hr_status metrics_init(struct metrics *m, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    if (pthread_mutex_init(&m->lock, NULL) != 0)
        return hr_err(err, errlen, HR_ERR_INTERNAL, "cannot create the metrics lock");
#define METRICS_N(a) ((int)(sizeof(a) / sizeof((a)[0])))
    metrics_histogram_setup(&m->ttft, METRICS_TTFT, "time from submission to the first token",
                            metrics_ttft_bounds, METRICS_N(metrics_ttft_bounds));
    metrics_histogram_setup(&m->itl, METRICS_ITL, "time between consecutive tokens of one sample",
                            metrics_itl_bounds, METRICS_N(metrics_itl_bounds));
    metrics_histogram_setup(&m->e2e, METRICS_E2E, "time from submission to the last event of a request",
                            metrics_e2e_bounds, METRICS_N(metrics_e2e_bounds));
#undef METRICS_N
    return HR_OK;
}

bool metrics_instance_valid(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n < 1 || n > METRICS_INSTANCE_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == ':' || c == '-'))
            return false;
    }
    return true;
}

void metrics_set_instance(struct metrics *m, const char *name)
{
    m->label[0] = m->label_pre[0] = 0;
    if (!name || !metrics_instance_valid(name))
        return;
    snprintf(m->label, sizeof m->label, "{%s=\"%s\"}", METRICS_INSTANCE_LABEL, name);
    snprintf(m->label_pre, sizeof m->label_pre, "%s=\"%s\",", METRICS_INSTANCE_LABEL, name);
}

void metrics_free(struct metrics *m)
{
    if (!m || !m->ttft.name)
        return;
    pthread_mutex_destroy(&m->lock);
    memset(m, 0, sizeof *m);
}

void metrics_count_request(struct metrics *m, enum metrics_endpoint ep, int http_status)
{
    if ((int)ep < 0 || (int)ep >= METRICS_ENDPOINT_COUNT || http_status < 100 || http_status >= 600)
        return;
    pthread_mutex_lock(&m->lock);
    m->requests[ep][http_status]++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_count_disconnect(struct metrics *m)
{
    pthread_mutex_lock(&m->lock);
    m->disconnects++;
    pthread_mutex_unlock(&m->lock);
}

static void metrics_observe(struct metrics *m, struct metrics_histogram *h, double v)
{
    if (!(v >= 0))
        v = 0;
    int b = 0;
    while (b < h->n_bounds && v > h->bounds[b])
        b++;
    pthread_mutex_lock(&m->lock);
    h->counts[b]++;
    h->sum += v;
    h->count++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_observe_ttft(struct metrics *m, double seconds) { metrics_observe(m, &m->ttft, seconds); }
void metrics_observe_itl(struct metrics *m, double seconds) { metrics_observe(m, &m->itl, seconds); }
void metrics_observe_e2e(struct metrics *m, double seconds) { metrics_observe(m, &m->e2e, seconds); }

static void metrics_render_histogram(const struct metrics *m, const struct metrics_histogram *h, struct strbuf *out)
{
    strbuf_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", h->name, h->help, h->name);
    int64_t cum = 0;
    for (int b = 0; b < h->n_bounds; b++) {
        cum += h->counts[b];
        strbuf_printf(out, "%s_bucket{%sle=\"%g\"} %lld\n", h->name, m->label_pre, h->bounds[b], (long long)cum);
    }
    cum += h->counts[h->n_bounds];
    strbuf_printf(out, "%s_bucket{%sle=\"+Inf\"} %lld\n%s_sum%s %.9g\n%s_count%s %lld\n", h->name, m->label_pre,
                  (long long)cum, h->name, m->label, h->sum, h->name, m->label, (long long)h->count);
}

enum hr_status metrics_render(struct metrics *m, const struct hearth_stats *stats, bool ready, struct strbuf *out)
{
    strbuf_printf(out, "# HELP %s 1 when the model is loaded and serving\n# TYPE %s gauge\n%s%s %d\n", METRICS_READY,
                  METRICS_READY, METRICS_READY, m->label, ready ? 1 : 0);
    pthread_mutex_lock(&m->lock);
    strbuf_printf(out, "# HELP %s HTTP requests by endpoint and status\n# TYPE %s counter\n", METRICS_REQUESTS_TOTAL,
                  METRICS_REQUESTS_TOTAL);
    for (int e = 0; e < METRICS_ENDPOINT_COUNT; e++)
        for (int c = 100; c < 600; c++)
            if (m->requests[e][c])
                strbuf_printf(out, "%s{%sendpoint=\"%s\",code=\"%d\"} %lld\n", METRICS_REQUESTS_TOTAL, m->label_pre,
                              metrics_endpoint_names[e], c, (long long)m->requests[e][c]);
    strbuf_printf(out, "# HELP %s streams whose client went away before the end\n# TYPE %s counter\n%s%s %lld\n",
                  METRICS_DISCONNECTS_TOTAL, METRICS_DISCONNECTS_TOTAL, METRICS_DISCONNECTS_TOTAL, m->label,
                  (long long)m->disconnects);
    strbuf_printf(out,
                  "# HELP %s streams cancelled because their client stopped reading (--max-unsent-bytes)\n"
                  "# TYPE %s counter\n%s%s %lld\n",
                  METRICS_STALLED_TOTAL, METRICS_STALLED_TOTAL, METRICS_STALLED_TOTAL, m->label,
                  (long long)(stats ? stats->requests_stalled : 0));
    metrics_render_histogram(m, &m->ttft, out);
    metrics_render_histogram(m, &m->itl, out);
    metrics_render_histogram(m, &m->e2e, out);
    pthread_mutex_unlock(&m->lock);
    if (stats) {
#define METRICS_EMIT(name, type, help, field) \
    strbuf_printf(out, "# HELP %s %s\n# TYPE %s %s\n%s%s %lld\n", name, help, name, type, name, m->label, \
                  (long long)stats->field);
        METRICS_ENGINE_LIST(METRICS_EMIT)
#undef METRICS_EMIT
    }
    return out->oom ? HR_ERR_NOMEM : HR_OK;
}
