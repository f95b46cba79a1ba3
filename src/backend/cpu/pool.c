/* CPU thread pool: n-1 persistent workers plus the caller. A dispatch and a barrier each
 * cost well under a microsecond while threads spin; after a short spin a waiting thread
 * sleeps on a condition variable, so an idle pool (or an oversubscribed machine) does not
 * burn cores. */
#include "backend/cpu/cpu.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

/* A waiting thread spins for up to OB_POOL_SPIN_S (the common case: every thread has its
 * own core and the wait is a microsecond), yielding now and then in case there are more
 * threads than free cores and the thread being waited for needs this one, then sleeps. */
#define OB_POOL_SPIN_S 1e-3

typedef void (*ob_pool_fn)(void *arg, int ith, int nth);

typedef struct ob_pool_worker {
    ob_cpu_pool *pool;
    int ith;
    pthread_t tid;
} ob_pool_worker;

struct ob_cpu_pool {
    int n;                       /* threads including the caller */
    ob_pool_worker *workers;     /* [n - 1] */
    int n_started;
    /* dispatch: workers wait for job_gen to move */
    atomic_uint job_gen;
    ob_pool_fn job_fn;
    void *job_arg;
    bool stop;
    /* barrier: the last thread to arrive resets count and moves bar_gen */
    atomic_int bar_count;
    atomic_uint bar_gen;
    pthread_mutex_t mu;
    pthread_cond_t cv_job, cv_bar;
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

typedef struct ob_waiter { unsigned i; double t0; } ob_waiter;

/* One step of waiting; false once the caller should go to sleep. */
static inline bool wait_step(ob_waiter *w) {
    if (++w->i & 127) { cpu_relax(); return true; }
    double now = ob_time_s();
    if (w->t0 == 0) w->t0 = now;
    else if (now - w->t0 > OB_POOL_SPIN_S) return false;
    if ((w->i >> 7) % 8 == 0) sched_yield();
    return true;
}

static void pool_barrier(ob_cpu_pool *p) {
    if (p->n == 1) return;
    unsigned gen = atomic_load_explicit(&p->bar_gen, memory_order_acquire);
    if (atomic_fetch_add_explicit(&p->bar_count, 1, memory_order_acq_rel) == p->n - 1) {
        atomic_store_explicit(&p->bar_count, 0, memory_order_relaxed);
        /* The generation moves under the mutex so a thread about to sleep cannot miss it. */
        pthread_mutex_lock(&p->mu);
        atomic_store_explicit(&p->bar_gen, gen + 1, memory_order_release);
        pthread_cond_broadcast(&p->cv_bar);
        pthread_mutex_unlock(&p->mu);
        return;
    }
    ob_waiter wt = {0, 0};
    while (wait_step(&wt))
        if (atomic_load_explicit(&p->bar_gen, memory_order_acquire) != gen) return;
    pthread_mutex_lock(&p->mu);
    while (atomic_load_explicit(&p->bar_gen, memory_order_acquire) == gen) pthread_cond_wait(&p->cv_bar, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void ob_cpu_sync(const ob_cpu_op_ctx *c) {
    if (c->nth > 1 && c->pool) pool_barrier(c->pool);
}

static void *worker_main(void *arg) {
    ob_pool_worker *w = arg;
    ob_cpu_pool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned gen;
        ob_waiter wt = {0, 0};
        while ((gen = atomic_load_explicit(&p->job_gen, memory_order_acquire)) == seen) {
            if (wait_step(&wt)) continue;
            pthread_mutex_lock(&p->mu);
            while ((gen = atomic_load_explicit(&p->job_gen, memory_order_acquire)) == seen)
                pthread_cond_wait(&p->cv_job, &p->mu);
            pthread_mutex_unlock(&p->mu);
            break;
        }
        seen = gen;
        if (p->stop) return NULL;
        p->job_fn(p->job_arg, w->ith, p->n);
        pool_barrier(p);
    }
}

ob_cpu_pool *ob_cpu_pool_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    ob_cpu_pool *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    p->n = n_threads;
    atomic_init(&p->job_gen, 0);
    atomic_init(&p->bar_count, 0);
    atomic_init(&p->bar_gen, 0);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_job, NULL);
    pthread_cond_init(&p->cv_bar, NULL);
    if (n_threads > 1) {
        p->workers = calloc((size_t)n_threads - 1, sizeof(*p->workers));
        if (!p->workers) { ob_cpu_pool_free(p); return NULL; }
        for (int i = 0; i < n_threads - 1; i++) {
            p->workers[i].pool = p;
            p->workers[i].ith = i + 1;
            if (pthread_create(&p->workers[i].tid, NULL, worker_main, &p->workers[i]) != 0) {
                ob_cpu_pool_free(p);
                return NULL;
            }
            p->n_started++;
        }
    }
    return p;
}

void ob_cpu_pool_free(ob_cpu_pool *p) {
    if (!p) return;
    if (p->n_started > 0) {
        pthread_mutex_lock(&p->mu);
        p->stop = true;
        atomic_fetch_add_explicit(&p->job_gen, 1, memory_order_release);
        pthread_cond_broadcast(&p->cv_job);
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < p->n_started; i++) pthread_join(p->workers[i].tid, NULL);
    }
    free(p->workers);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_job);
    pthread_cond_destroy(&p->cv_bar);
    free(p);
}

int ob_cpu_pool_size(const ob_cpu_pool *p) { return p->n; }

void ob_cpu_pool_run(ob_cpu_pool *p, void (*fn)(void *arg, int ith, int nth), void *arg) {
    if (p->n == 1) { fn(arg, 0, 1); return; }
    p->job_fn = fn;
    p->job_arg = arg;
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->job_gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv_job);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0, p->n);
    pool_barrier(p);
}
