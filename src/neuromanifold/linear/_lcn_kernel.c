/*
 * The NTK of a 1-D linear convolutional network by running sums along its diagonals.
 *
 * Layer l has k_l taps, dilation d_l = S_{l-1} and complement product R_l (R_l[i] = 0
 * outside [0, m_l)); column p of J_l is R_l placed at offset p d_l, so for e >= 0
 *
 *     G_l(e, b) := G_l[b, b + e] = sum_{p < k_l} R_l[b - p d_l] R_l[b + e - p d_l],
 *
 * and, stepping b by d_l along the diagonal e,
 *
 *     G_l(e, b) = G_l(e, b - d_l) + R_l[b] R_l[b + e] - R_l[b - k_l d_l] R_l[b + e - k_l d_l].
 *
 * K = sum_l G_l. Diagonals are taken in strips of STRIP; a strip keeps, per layer, the
 * last d_l values of each of its diagonals (a ring of d_l rows of STRIP doubles), so the
 * running sums stay in cache, and an entry of the upper triangle costs 2 L multiply-adds
 * instead of the sum_l k_l of the dense product J J^T. The sums of BLK consecutive b are
 * staged and then written as runs along rows: row segments of the upper triangle and the
 * mirrored runs of the lower one, whose cache lines are prefetched some steps ahead. Strips are
 * independent; `threads` workers take them in turn.
 *
 * Rounding: each running sum adds and later subtracts every product on its diagonal, so an
 * entry carries an absolute error set by the largest products met earlier on its diagonal:
 * about n eps max_i R_l[i]^2 <= n eps max |K| per layer from its n / d_l updates (L times that
 * for the sum; measured below n eps max |K|). The caller recomputes the main diagonal, passes
 * d = 1 for one-tap layers (their G_l needs no window) and checks that (k_l + 2) max R_l^2
 * cannot overflow (neuromanifold.linear._compiled).
 *
 * Loaded with ctypes by neuromanifold.linear._compiled; PyInit only makes the shared object a
 * valid extension module for setuptools.
 */
#include <Python.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define STRIP 64 /* diagonals per strip */
#define CHUNK 64 /* lanes summed over the layers at once (vectors of four) */
#define BLK 64   /* consecutive b staged before writing */
#define PF_UP 32 /* the upper row segment of b + PF_UP is prefetched at b ... */
#define PF_LO 64 /* ... and the lower-triangle run of row b + e0 + PF_LO */

/* an AVX2/FMA clone chosen at load time where the CPU has them (GCC >= 12) */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && defined(__x86_64__)
#define NM_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define NM_CLONES
#endif

/* four doubles, loaded and stored without an alignment assumption */
typedef double v4 __attribute__((vector_size(32), aligned(8)));
#define LOAD(p) (*(const v4 *)(p))
#define STORE(p, v) (*(v4 *)(p) = (v))

typedef struct {
    double *K;
    const double *R; /* layer l's R_l[i] is R[start[l] + i], -k_l d_l <= i < n + STRIP */
    const long *start, *d, *k;
    long L, n, nstrips;
    long next; /* the next strip to take (under lock) */
    pthread_mutex_t lock;
} job_t;

typedef struct {
    double *ring;       /* sum_l d_l * STRIP */
    long *phase;        /* L */
    const double **r1;  /* L */
    const double **r2;  /* L */
    double **s;         /* L */
    double *x, *y;      /* L each */
    double *stage;      /* BLK * STRIP */
} scratch_t;

/* Write the staged sums of rows b0 <= b < b1 of strip e0. */
static inline void flush(double *K, long n, long e0, long b0, long b1, const double *stage)
{
    long b, r;
    for (b = b0; b < b1; ++b) {
        const long valid = n - e0 - b < STRIP ? n - e0 - b : STRIP;
        memcpy(K + b * n + b + e0, stage + (b - b0) * STRIP, sizeof(double) * (size_t)valid);
    }
    for (r = b0 + e0; r < b1 + e0 + STRIP - 1 && r < n; ++r) {
        const long lo = r - e0 - STRIP + 1 > b0 ? r - e0 - STRIP + 1 : b0;
        const long hi = r - e0 < b1 - 1 ? r - e0 : b1 - 1;
        double *dst = K + r * n;
        for (b = lo; b <= hi; ++b) dst[b] = stage[(b - b0) * STRIP + (r - e0 - b)];
    }
}

/* Ask for the cache lines that the flushes of later steps will write (into L2). */
static inline void prefetch_rows(const double *K, long n, long e0, long b)
{
    const long bu = b + PF_UP, bl = b + PF_LO;
    long i;
    if (bu + e0 < n)
        for (i = 0; i < STRIP; i += 8) __builtin_prefetch(K + bu * n + bu + e0 + i, 1, 1);
    if (bl + e0 < n)
        for (i = 0; i < STRIP; i += 8)
            __builtin_prefetch(K + (bl + e0) * n + bl - STRIP + 1 + i, 1, 1);
}

static inline __attribute__((always_inline)) void strip_sums(const job_t *job, long e0,
                                                             scratch_t *w)
{
    const long L = job->L, n = job->n;
    const long *d = job->d, *k = job->k;
    long b, l, c, off = 0, b0 = 0;
    for (l = 0; l < L; ++l) {
        memset(w->ring + off * STRIP, 0, sizeof(double) * (size_t)(d[l] * STRIP));
        w->phase[l] = 0;
        off += d[l];
    }
    for (b = 0; b + e0 < n; ++b) {
        off = 0;
        for (l = 0; l < L; ++l) {
            const double *Rl = job->R + job->start[l];
            const long back = k[l] * d[l];
            w->x[l] = Rl[b];
            w->y[l] = Rl[b - back];
            w->r1[l] = Rl + b + e0;
            w->r2[l] = Rl + b - back + e0;
            w->s[l] = w->ring + (off + w->phase[l]) * STRIP;
            if (++w->phase[l] == d[l]) w->phase[l] = 0;
            off += d[l];
        }
        prefetch_rows(job->K, n, e0, b);
        double *acc = w->stage + (b - b0) * STRIP;
        for (c = 0; c < STRIP; c += CHUNK) {
            v4 a[CHUNK / 4];
            long j;
            for (j = 0; j < CHUNK / 4; ++j) a[j] = (v4){0.0, 0.0, 0.0, 0.0};
            for (l = 0; l < L; ++l) {
                double *sl = w->s[l] + c;
                const double *p1 = w->r1[l] + c, *p2 = w->r2[l] + c;
                const v4 xl = {w->x[l], w->x[l], w->x[l], w->x[l]};
                const v4 yl = {w->y[l], w->y[l], w->y[l], w->y[l]};
                for (j = 0; j < CHUNK / 4; ++j) {
                    const v4 t = LOAD(sl + 4 * j) + xl * LOAD(p1 + 4 * j) - yl * LOAD(p2 + 4 * j);
                    STORE(sl + 4 * j, t);
                    a[j] += t;
                }
            }
            for (j = 0; j < CHUNK / 4; ++j) STORE(acc + c + 4 * j, a[j]);
        }
        if (b + 1 - b0 == BLK || b + 1 + e0 == n) {
            flush(job->K, n, e0, b0, b + 1, w->stage);
            b0 = b + 1;
        }
    }
}

/* Take strips until none is left (none if the scratch cannot be allocated). */
NM_CLONES
static void work(job_t *job)
{
    const long L = job->L;
    long total = 0, l, e;
    for (l = 0; l < L; ++l) total += job->d[l];
    scratch_t w;
    w.ring = aligned_alloc(64, sizeof(double) * (size_t)(total * STRIP)); /* STRIP % 8 == 0 */
    w.phase = malloc(sizeof(long) * (size_t)L);
    w.r1 = malloc(sizeof(double *) * (size_t)L);
    w.r2 = malloc(sizeof(double *) * (size_t)L);
    w.s = malloc(sizeof(double *) * (size_t)L);
    w.x = malloc(sizeof(double) * (size_t)(2 * L));
    w.stage = aligned_alloc(64, sizeof(double) * BLK * STRIP);
    if (w.ring && w.phase && w.r1 && w.r2 && w.s && w.x && w.stage) {
        w.y = w.x + L;
        for (;;) {
            pthread_mutex_lock(&job->lock);
            e = job->next++;
            pthread_mutex_unlock(&job->lock);
            if (e >= job->nstrips) break;
            strip_sums(job, e * STRIP, &w);
        }
    }
    free(w.ring);
    free(w.phase);
    free((void *)w.r1);
    free((void *)w.r2);
    free(w.s);
    free(w.x);
    free(w.stage);
}

static void *work_thread(void *arg)
{
    work((job_t *)arg);
    return NULL;
}

/*
 * K: output, n * n doubles, row-major; every entry is written.
 * Returns 0 when every strip was written, 1 otherwise (no worker could allocate its
 * scratch). A thread that cannot be started, or cannot allocate, leaves its strips to the others.
 */
int nm_lcn_ntk_1d(double *K, const double *R, const long *start, const long *d, const long *k,
                  long L, long n, long threads)
{
    job_t job = {K, R, start, d, k, L, n, (n + STRIP - 1) / STRIP, 0, PTHREAD_MUTEX_INITIALIZER};
    pthread_t tid[64];
    long t, started = 0;
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    for (t = 1; t < threads; ++t) {
        if (pthread_create(&tid[started], NULL, work_thread, &job) != 0) break;
        ++started;
    }
    work(&job);
    for (t = 0; t < started; ++t) pthread_join(tid[t], NULL);
    pthread_mutex_destroy(&job.lock);
    return job.next >= job.nstrips ? 0 : 1;
}

int nm_lcn_strip(void) { return STRIP; }

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_lcn_kernel", "C kernel of the 1-D LCN NTK (loaded with ctypes).", -1,
    NULL, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__lcn_kernel(void) { return PyModule_Create(&module); }
