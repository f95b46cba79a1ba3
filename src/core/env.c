#include "core/env.h"
#include "core/common.h"
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

const ob_env_var ob_env_shared[] = {
    {"ONEBIT_TEST_FAULT", OB_ENV_STRING, 0, 0, 0, 0, "",
     "tests only: the launch of the node of this name faults (CUDA) or never finishes (Vulkan)"},
};
const size_t ob_env_shared_n = OB_ARRAY_LEN(ob_env_shared);

/* The value one switch takes from text s (set in the environment, not empty): false when s
 * does not parse or lies outside the range. */
typedef union env_val { bool b; int i; unsigned u; double d; } env_val;

static bool env_read(const ob_env_var *v, const char *s, env_val *out) {
    char *end = NULL;
    errno = 0;
    switch (v->kind) {
    case OB_ENV_BOOL:
        if (strcmp(s, "0") && strcmp(s, "1")) return false;
        out->b = s[0] == '1';
        return true;
    case OB_ENV_INT: {
        long x = strtol(s, &end, 10);
        if (errno || end == s || *end || (double)x < v->min || (double)x > v->max) return false;
        out->i = (int)x;
        return true;
    }
    case OB_ENV_MASK: {
        if (strchr(s, '-')) return false;
        unsigned long x = strtoul(s, &end, 0);
        if (errno || end == s || *end || x > 0xffffffffUL || (x & ~(unsigned long)v->max)) return false;
        out->u = (unsigned)x;
        return true;
    }
    case OB_ENV_DOUBLE: {
        double x = strtod(s, &end);
        if (errno || end == s || *end || !isfinite(x) || x < v->min || x > v->max) return false;
        out->d = x;
        return true;
    }
    case OB_ENV_STRING: return strlen(s) < OB_ENV_STR_MAX;
    }
    return false;
}

static void env_store(const ob_env_var *v, void *opts, const env_val *x, const char *s) {
    char *p = (char *)opts + v->offset;
    switch (v->kind) {
    case OB_ENV_BOOL: *(bool *)p = x->b; break;
    case OB_ENV_INT: *(int *)p = x->i; break;
    case OB_ENV_MASK: *(unsigned *)p = x->u; break;
    case OB_ENV_DOUBLE: *(double *)p = x->d; break;
    case OB_ENV_STRING: snprintf(p, OB_ENV_STR_MAX, "%s", s); break;
    }
}

static void env_default(const ob_env_var *v, env_val *x) {
    switch (v->kind) {
    case OB_ENV_BOOL: x->b = v->def != 0; break;
    case OB_ENV_INT: x->i = (int)v->def; break;
    case OB_ENV_MASK: x->u = (unsigned)v->def; break;
    case OB_ENV_DOUBLE: x->d = v->def; break;
    case OB_ENV_STRING: break;
    }
}

static void env_default_text(const ob_env_var *v, char *buf, size_t len) {
    switch (v->kind) {
    case OB_ENV_BOOL:
    case OB_ENV_INT: snprintf(buf, len, "%d", (int)v->def); break;
    case OB_ENV_MASK: snprintf(buf, len, "0x%x", (unsigned)v->def); break;
    case OB_ENV_DOUBLE: snprintf(buf, len, "%g", v->def); break;
    case OB_ENV_STRING: snprintf(buf, len, "\"%s\"", v->def_str ? v->def_str : ""); break;
    }
}

int ob_env_parse(const ob_env_var *t, size_t n, void *opts) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        const ob_env_var *v = &t[i];
        env_val x = {0};
        env_default(v, &x);
        env_store(v, opts, &x, v->def_str ? v->def_str : "");
        const char *s = getenv(v->name);
        if (!s || !s[0]) continue;
        if (env_read(v, s, &x)) {
            env_store(v, opts, &x, s);
            continue;
        }
        char d[48];
        env_default_text(v, d, sizeof(d));
        if (v->kind == OB_ENV_MASK)
            ob_log(OB_LOG_WARN, "%s=%s: not a mask of bits 0x%x; default %s kept", v->name, s, (unsigned)v->max, d);
        else if (v->kind == OB_ENV_BOOL)
            ob_log(OB_LOG_WARN, "%s=%s: not 0 or 1; default %s kept", v->name, s, d);
        else if (v->kind == OB_ENV_STRING)
            ob_log(OB_LOG_WARN, "%s: longer than %d characters; default %s kept", v->name, OB_ENV_STR_MAX - 1, d);
        else
            ob_log(OB_LOG_WARN, "%s=%s: not a number in [%g, %g]; default %s kept", v->name, s, v->min, v->max, d);
        bad++;
    }
    return bad;
}

void ob_env_list(FILE *f, const char *title, const ob_env_var *t, size_t n) {
    fprintf(f, "%s:\n", title);
    for (size_t i = 0; i < n; i++) {
        const ob_env_var *v = &t[i];
        char d[48], val[64];
        env_default_text(v, d, sizeof(d));
        const char *s = getenv(v->name);
        env_val x = {0};
        if (!s || !s[0]) snprintf(val, sizeof(val), "default %s", d);
        else if (env_read(v, s, &x)) snprintf(val, sizeof(val), "=%.40s", s);
        else snprintf(val, sizeof(val), "bad, default %s", d);
        fprintf(f, "  %-28s %-16s %s\n", v->name, val, v->help);
    }
}
