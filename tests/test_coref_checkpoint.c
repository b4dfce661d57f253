/*
 * test_coref_checkpoint.c - checkpoints round-trip, are written atomically,
 * and every fault gives a clear error instead of a crash.
 */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests.h"

#define FP 0x1234abcdu

static char dir[64];
static char path[128];

static void setup(void)
{
    strcpy(dir, "/tmp/qkv_io_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/m.qkv", dir);
}

static void teardown(void)
{
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static qkv_coref_model *small_model(void)
{
    qkv_coref_config c = {7, 3, 4, 1, 0.5, 9};
    qkv_coref_model *m = qkv_coref_model_new(&c, NULL);
    ck_assert_ptr_nonnull(m);
    return m;
}

/* How many entries (other than . and ..) the directory holds. */
static int files_in(const char *d)
{
    DIR *dp = opendir(d);
    ck_assert_ptr_nonnull(dp);
    int n = 0;
    for (struct dirent *e; (e = readdir(dp)) != NULL;)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(dp);
    return n;
}

/* Little-endian u32 and u64 into b. */
static void put32(unsigned char *b, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        b[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *b, uint64_t v)
{
    put32(b, (uint32_t)v);
    put32(b + 4, (uint32_t)(v >> 32));
}

/* Makes a well-framed file of n bytes from b: the declared size (at byte
 * 12) and the CRC-32 at the end agree with it, as a careful forger would
 * make them. */
static void frame(unsigned char *b, long n)
{
    put64(b + 12, (uint64_t)n);
    put32(b + n - 4, qkv_crc32(0, b, (size_t)n - 4));
}

static unsigned char *read_all(const char *p, long *n)
{
    FILE *f = fopen(p, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    rewind(f);
    unsigned char *b = malloc((size_t)*n);
    ck_assert_uint_eq(fread(b, 1, (size_t)*n, f), (size_t)*n);
    fclose(f);
    return b;
}

static void write_all(const char *p, const unsigned char *b, long n)
{
    FILE *f = fopen(p, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
}

/* Loads path and expects failure with the status and a message part. */
static void expect_load_error(const char *p, uint32_t fp, qkv_status want, const char *part)
{
    qkv_error err = qkv_error_none();
    ck_assert_ptr_null(qkv_coref_load(p, fp, &err));
    ck_assert_int_eq(err.status, want);
    ck_assert_msg(strstr(err.message, part) != NULL, "message '%s' lacks '%s'", err.message, part);
}

START_TEST(test_checkpoint_round_trips_exactly)
{
    qkv_coref_model *m = small_model();
    qkv_error err = qkv_error_none();
    ck_assert_int_eq(qkv_coref_save(m, FP, path, &err), QKV_OK);
    qkv_coref_model *l = qkv_coref_load(path, FP, &err);
    ck_assert_ptr_nonnull(l);
    ck_assert_int_eq(l->cfg.vocab, 7);
    ck_assert_int_eq(l->cfg.d_k, 3);
    ck_assert_int_eq(l->cfg.classes, 4);
    ck_assert_int_eq(l->cfg.scaled, 1);
    ck_assert(l->cfg.init_std == 0.5);
    ck_assert_uint_eq(l->cfg.seed, 9);
    for (int i = 0; i < QKV_COREF_PARAMS; i++)
        for (size_t j = 0; j < m->params[i]->numel; j++)
            ck_assert((float)m->params[i]->data[j] == (float)l->params[i]->data[j]);
    /* atomic write leaves no temporary file behind */
    ck_assert_int_eq(files_in(dir), 1);
    qkv_coref_model_free(m);
    qkv_coref_model_free(l);
}
END_TEST

START_TEST(test_every_checkpoint_fault_is_a_clear_error)
{
    qkv_coref_model *m = small_model();
    char p2[160];
    ck_assert_int_eq(qkv_coref_save(m, FP, path, NULL), QKV_OK);
    long n;
    unsigned char *good = read_all(path, &n), *b = malloc((size_t)n);
    snprintf(p2, sizeof p2, "%s/bad.qkv", dir);

    expect_load_error("/nonexistent/qkv/model", FP, QKV_ERR_IO, "No such file");
    expect_load_error(dir, FP, QKV_ERR_IO, "is a directory");
    write_all(p2, good, 0);
    expect_load_error(p2, FP, QKV_ERR_FORMAT, "is empty");
    write_all(p2, good, n - 10);
    expect_load_error(p2, FP, QKV_ERR_FORMAT, "truncated");
    write_all(p2, good, 5);
    expect_load_error(p2, FP, QKV_ERR_FORMAT, "not a qkv checkpoint");
    memcpy(b, good, (size_t)n);
    b[n / 2] ^= 0x10; /* one flipped bit in the weights */
    write_all(p2, b, n);
    expect_load_error(p2, FP, QKV_ERR_FORMAT, "checksum mismatch");
    memcpy(b, good, (size_t)n);
    b[0] = 'X';
    write_all(p2, b, n);
    expect_load_error(p2, FP, QKV_ERR_FORMAT, "wrong magic");
    memcpy(b, good, (size_t)n);
    b[8] = 2; /* format version 2 */
    write_all(p2, b, n);
    expect_load_error(p2, FP, QKV_ERR_FORMAT, "format version 2");
    expect_load_error(path, FP + 1, QKV_ERR_FORMAT, "another vocabulary");
    /* the good file still loads */
    qkv_coref_model *l = qkv_coref_load(path, FP, NULL);
    ck_assert_ptr_nonnull(l);
    qkv_coref_model_free(l);
    free(good);
    free(b);
    qkv_coref_model_free(m);
}
END_TEST

START_TEST(test_save_reports_an_unwritable_path)
{
    qkv_coref_model *m = small_model();
    char p[160];
    qkv_error err = qkv_error_none();
    snprintf(p, sizeof p, "%s/missing/dir/m.qkv", dir);
    ck_assert_int_eq(qkv_coref_save(m, FP, p, &err), QKV_ERR_IO);
    ck_assert_int_eq(err.status, QKV_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err.message, "cannot write"));
    qkv_coref_model_free(m);
}
END_TEST

START_TEST(test_a_header_declaring_huge_tensors_is_refused_before_allocating)
{
    /* a 1 KiB file, well framed, whose header declares vocab 2^20 and d_k
     * 4096: 2^32 weights, 16 GiB; refused from the sizes alone, having
     * allocated nothing but the file's own bytes */
    qkv_coref_model *m = small_model();
    ck_assert_int_eq(qkv_coref_save(m, FP, path, NULL), QKV_OK);
    long n;
    unsigned char *good = read_all(path, &n), *b = calloc(1024, 1);
    memcpy(b, good, 60);
    put32(b + 24, 1u << 20); /* vocab */
    put32(b + 28, 4096);     /* d_k */
    frame(b, 1024);
    size_t before = qkv_alloc_count();
    qkv_error err = qkv_error_none();
    ck_assert_ptr_null(qkv_coref_load_buffer(b, 1024, "big.qkv", FP, &err));
    ck_assert_uint_eq(qkv_alloc_count(), before); /* nothing at all */
    ck_assert_int_eq(err.status, QKV_ERR_FORMAT);
    ck_assert_msg(strstr(err.message, "inconsistent sizes") != NULL, "%s", err.message);
    /* d_k beyond what any command allows is refused the same way */
    put32(b + 24, 7);
    put32(b + 28, 1u << 16);
    frame(b, 1024);
    ck_assert_ptr_null(qkv_coref_load_buffer(b, 1024, "wide.qkv", FP, &err));
    ck_assert_uint_eq(qkv_alloc_count(), before);
    free(b);
    free(good);
    qkv_coref_model_free(m);
}
END_TEST

START_TEST(test_the_framing_must_be_exact)
{
    qkv_coref_model *m = small_model();
    ck_assert_int_eq(qkv_coref_save(m, FP, path, NULL), QKV_OK);
    long n;
    unsigned char *good = read_all(path, &n), *b = calloc((size_t)n + 8, 1);
    qkv_error err = qkv_error_none();
    /* four bytes inserted before the CRC, everything else re-framed: the
     * weights would load unshifted only by luck */
    memcpy(b, good, (size_t)n - 4);
    frame(b, n + 4);
    ck_assert_ptr_null(qkv_coref_load_buffer(b, (size_t)n + 4, "long.qkv", FP, &err));
    ck_assert_msg(strstr(err.message, "inconsistent sizes"), "%s", err.message);
    /* two bytes short, re-framed: the CRC would be read as a weight */
    memcpy(b, good, (size_t)n);
    frame(b, n - 2);
    err = qkv_error_none();
    ck_assert_ptr_null(qkv_coref_load_buffer(b, (size_t)n - 2, "short.qkv", FP, &err));
    ck_assert_msg(strstr(err.message, "inconsistent sizes"), "%s", err.message);
    /* and the good bytes, re-framed the same way, still load */
    memcpy(b, good, (size_t)n);
    frame(b, n);
    qkv_coref_model *l = qkv_coref_load_buffer(b, (size_t)n, "same.qkv", FP, &err);
    ck_assert_ptr_nonnull(l);
    qkv_coref_model_free(l);
    free(b);
    free(good);
    qkv_coref_model_free(m);
}
END_TEST

/* Saves m, then checks that saving bad (which must fail with status want)
 * leaves the file exactly as it was and no temporary file behind. */
static void expect_save_refused(qkv_coref_model *bad, const char *target, qkv_status want,
                                const char *part)
{
    long n0, n1;
    unsigned char *before = read_all(path, &n0);
    qkv_error err = qkv_error_none();
    ck_assert_int_eq(qkv_coref_save(bad, FP, target, &err), want);
    ck_assert_msg(strstr(err.message, part) != NULL, "'%s' lacks '%s'", err.message, part);
    unsigned char *after = read_all(path, &n1);
    ck_assert(n0 == n1 && memcmp(before, after, (size_t)n0) == 0);
    free(before);
    free(after);
}

START_TEST(test_a_non_finite_model_never_replaces_a_good_one)
{
    qkv_coref_model *m = small_model();
    ck_assert_int_eq(qkv_coref_save(m, FP, path, NULL), QKV_OK);
    m->wv->data[5] = NAN;
    expect_save_refused(m, path, QKV_ERR_NUMERIC, "wv[5] = nan");
    m->wv->data[5] = INFINITY;
    expect_save_refused(m, path, QKV_ERR_NUMERIC, "not finite");
    ck_assert_int_eq(files_in(dir), 1);
    qkv_coref_model_free(m);
}
END_TEST

START_TEST(test_saving_replaces_only_regular_files_and_follows_no_link)
{
    char link[160], victim[160], planted[160];
    qkv_coref_model *m = small_model();
    ck_assert_int_eq(qkv_coref_save(m, FP, path, NULL), QKV_OK);
    /* a device node stays a device */
    qkv_error err = qkv_error_none();
    ck_assert_int_eq(qkv_coref_save(m, FP, "/dev/null", &err), QKV_ERR_IO);
    ck_assert_msg(strstr(err.message, "not a regular file"), "%s", err.message);
    struct stat sb;
    ck_assert_int_eq(stat("/dev/null", &sb), 0);
    ck_assert(S_ISCHR(sb.st_mode));
    /* a symbolic link as the target is refused; its victim is untouched */
    snprintf(victim, sizeof victim, "%s/victim", dir);
    snprintf(link, sizeof link, "%s/link.qkv", dir);
    write_all(victim, (const unsigned char *)"victim", 6);
    ck_assert_int_eq(symlink(victim, link), 0);
    ck_assert_int_eq(qkv_coref_save(m, FP, link, &err), QKV_ERR_IO);
    ck_assert_msg(strstr(err.message, "symbolic link"), "%s", err.message);
    /* a link planted where the old fixed temporary name was is never
     * touched: the temporary file's name is new each time (O_EXCL) */
    snprintf(planted, sizeof planted, "%s.tmp", path);
    ck_assert_int_eq(symlink(victim, planted), 0);
    ck_assert_int_eq(qkv_coref_save(m, FP, path, NULL), QKV_OK);
    long n;
    unsigned char *v = read_all(victim, &n);
    ck_assert(n == 6 && memcmp(v, "victim", 6) == 0);
    free(v);
    ck_assert_int_eq(lstat(planted, &sb), 0);
    ck_assert(S_ISLNK(sb.st_mode));
    qkv_coref_model_free(m);
}
END_TEST

START_TEST(test_a_full_disk_leaves_the_previous_checkpoint)
{
    qkv_coref_model *m = small_model();
    ck_assert_int_eq(qkv_coref_save(m, FP, path, NULL), QKV_OK);
    m->wq->data[0] += 1;
    /* files may grow to 100 bytes only (this test runs in its own
     * process): writes past that fail with EFBIG, as on a full disk */
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim = {100, 100};
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim.rlim_max = old.rlim_max; /* lower the soft limit only, to raise it again */
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    long n0;
    unsigned char *before = read_all(path, &n0);
    qkv_error err = qkv_error_none();
    qkv_status s = qkv_coref_save(m, FP, path, &err);
    setrlimit(RLIMIT_FSIZE, &old); /* for the tests after this one (CK_FORK=no) */
    signal(SIGXFSZ, old_handler);
    ck_assert_int_eq(s, QKV_ERR_IO);
    ck_assert_msg(strstr(err.message, "cannot write"), "%s", err.message);
    long n1;
    unsigned char *after = read_all(path, &n1);
    ck_assert(n0 == n1 && memcmp(before, after, (size_t)n0) == 0);
    ck_assert_int_eq(files_in(dir), 1); /* the temporary file is gone */
    free(before);
    free(after);
    qkv_coref_model_free(m);
}
END_TEST

/* Saves the model twenty times to one path. */
static void *save_twenty(void *arg)
{
    qkv_coref_model *m = arg;
    for (int i = 0; i < 20; i++)
        if (qkv_coref_save(m, FP, path, NULL) != QKV_OK)
            return (void *)1;
    return NULL;
}

START_TEST(test_two_saves_to_one_path_at_once_both_succeed)
{
    qkv_coref_model *m = small_model();
    pthread_t a, b;
    void *ra, *rb;
    ck_assert_int_eq(pthread_create(&a, NULL, save_twenty, m), 0);
    ck_assert_int_eq(pthread_create(&b, NULL, save_twenty, m), 0);
    pthread_join(a, &ra);
    pthread_join(b, &rb);
    ck_assert_ptr_null(ra);
    ck_assert_ptr_null(rb);
    qkv_coref_model *l = qkv_coref_load(path, FP, NULL);
    ck_assert_ptr_nonnull(l);
    ck_assert_int_eq(files_in(dir), 1);
    qkv_coref_model_free(l);
    qkv_coref_model_free(m);
}
END_TEST

Suite *coref_checkpoint_suite(void)
{
    Suite *s = suite_create("coref_checkpoint");
    TCase *tc = tcase_create("checkpoint");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_checkpoint_round_trips_exactly);
    tcase_add_test(tc, test_every_checkpoint_fault_is_a_clear_error);
    tcase_add_test(tc, test_save_reports_an_unwritable_path);
    tcase_add_test(tc, test_a_header_declaring_huge_tensors_is_refused_before_allocating);
    tcase_add_test(tc, test_the_framing_must_be_exact);
    tcase_add_test(tc, test_a_non_finite_model_never_replaces_a_good_one);
    tcase_add_test(tc, test_saving_replaces_only_regular_files_and_follows_no_link);
    tcase_add_test(tc, test_a_full_disk_leaves_the_previous_checkpoint);
    tcase_add_test(tc, test_two_saves_to_one_path_at_once_both_succeed);
    suite_add_tcase(s, tc);
    return s;
}
