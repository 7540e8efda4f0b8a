/*
 * serq_lean shim: the few lines of C between Python (cffi, API mode) and the SerqLang shared
 * library built by `lake build` (.lake/build/lib/libserqlang.so).
 *
 * Why C at all: the helpers needed to cross the boundary (lean_string_cstr, lean_dec,
 * lean_io_mk_world, lean_io_result_is_ok, lean_usize_to_nat, ...) are `static inline` in
 * lean.h, so they only exist once compiled against that header (docs/lean.md "FFI contract").
 *
 * Shape (doc/dev/ffi.md of leanprover/lean4; tests/lake/examples/reverse-ffi/main.c):
 *   - SerqLang exports `serq_init(ir, sessions)`, `serq_step(config)`, `serq_run(config, k)`,
 *     Lean `String`s in and out. Arguments of `@[export]` functions are owned: the callee
 *     consumes them, so this shim does not release what it passes in. The result is owned by
 *     us: we copy it out (strdup) and release it with lean_dec.
 *   - Once per process, before any call: runtime init (`lean_initialize`, because SerqLang
 *     imports the `Lean` package for Lean.Json — never together with
 *     lean_initialize_runtime_module), the root module's initializer with builtin = 1, check
 *     lean_io_result_is_ok, then lean_io_mark_end_initialization.
 *   - The library and its initializer are looked up with dlopen/dlsym, so the initializer's
 *     name and shape (`initialize_serq_SerqLang(uint8_t)` in recent releases,
 *     `initialize_SerqLang(uint8_t, lean_object*)` in older ones) are chosen at run time by the
 *     Python side, which also reports the initialize_* symbols it found when neither exists.
 *   - Not thread-safe: the Python wrapper serialises every call with a lock.
 */
#include <lean/lean.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Defined in the Lean runtime (libleanshared), not declared by every lean.h. */
extern void lean_initialize(void);

typedef lean_object *(*serq_init1_t)(uint8_t);
typedef lean_object *(*serq_init2_t)(uint8_t, lean_object *);
typedef lean_object *(*serq_fn1_t)(lean_object *);
typedef lean_object *(*serq_fn2_t)(lean_object *, lean_object *);

static int g_state = 0; /* 0: not initialised; 1: ready; -1: initialisation failed (final) */
static serq_fn1_t g_step = NULL;
static serq_fn2_t g_init = NULL;
static serq_fn2_t g_run = NULL;
static char g_err[4096];

static void set_err(const char *what, const char *detail) {
    snprintf(g_err, sizeof g_err, "%s%s%s", what, detail ? ": " : "", detail ? detail : "");
}

const char *serq_last_error(void) { return g_err; }

int serq_state(void) { return g_state; }

/* Make an already linked Lean runtime library global, so that libserqlang's undefined
 * symbols resolve against it. */
int serq_preload(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        set_err("cannot load a Lean runtime library", dlerror());
        return -1;
    }
    return 0;
}

int serq_load(const char *lib, const char *init_name, int init_arity) {
    if (g_state == 1) return 0;
    if (g_state == -1) return -1; /* the runtime is half initialised: never retry */
    void *h = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        set_err("cannot load the SerqLang library", dlerror());
        return -1;
    }
    void *init = dlsym(h, init_name);
    g_step = (serq_fn1_t)dlsym(h, "serq_step");
    g_init = (serq_fn2_t)dlsym(h, "serq_init");
    g_run = (serq_fn2_t)dlsym(h, "serq_run");
    if (!init) {
        set_err("module initializer not found", init_name);
        return -1;
    }
    if (!g_step || !g_init || !g_run) {
        set_err("the library does not export serq_init, serq_step and serq_run", lib);
        return -1;
    }
    lean_initialize();
    /* A Lean panic must not let a wrong answer through silently. */
    lean_set_exit_on_panic(true);
    lean_object *res;
    if (init_arity == 1) {
        res = ((serq_init1_t)init)(1);
    } else {
        res = ((serq_init2_t)init)(1, lean_io_mk_world());
    }
    if (lean_io_result_is_ok(res)) {
        lean_dec_ref(res);
    } else {
        lean_io_result_show_error(res);
        lean_dec(res);
        g_state = -1;
        set_err("the SerqLang module initializer failed (its message was printed on stderr)", NULL);
        return -1;
    }
    lean_io_mark_end_initialization();
    g_state = 1;
    return 0;
}

/* Copy a Lean string out and release it. */
static char *take(lean_object *s) {
    char *out = strdup(lean_string_cstr(s));
    lean_dec(s);
    return out;
}

char *serq_init_c(const char *ir, const char *sessions) {
    if (g_state != 1) return NULL;
    return take(g_init(lean_mk_string(ir), lean_mk_string(sessions)));
}

char *serq_step_c(const char *config) {
    if (g_state != 1) return NULL;
    return take(g_step(lean_mk_string(config)));
}

char *serq_run_c(const char *config, size_t k) {
    if (g_state != 1) return NULL;
    return take(g_run(lean_mk_string(config), lean_usize_to_nat(k)));
}

void serq_free(char *p) { free(p); }
