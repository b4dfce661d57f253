/*
 * test_coref_data.c - vocabulary, tokenizer (UTF-8 and unknown words), and the
 * generator's determinism and splits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests.h"

static const char *required[] = {
    "小明", "小刚", "小强", "小军", "大伟", "阿杰",     "小红", "小丽", "小芳", "小美", "小雪",
    "阿珍", "他",   "她",   "是",   "个",   "运动达人", "平时", "很",   "爱",   "打",   "篮球",
    "和",   "去",   "公园", "喜欢", "唱歌", "跳舞",     "跑步", "踢",   "足球", "画画", "看书",
    "老师", "学生", "朋友", "今天", "说",   "因为",     "所以", "的",   "，",   "。"};

START_TEST(test_vocabulary_has_every_required_word_and_gender)
{
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        ck_assert_msg(qkv_coref_word_id(required[i]) > 0, "missing %s", required[i]);
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(qkv_coref_kind(qkv_coref_word_id(required[i])), QKV_COREF_MALE);
        ck_assert_int_eq(qkv_coref_kind(qkv_coref_word_id(required[6 + i])), QKV_COREF_FEMALE);
    }
    ck_assert_int_eq(qkv_coref_kind(qkv_coref_word_id("他")), QKV_COREF_HE);
    ck_assert_int_eq(qkv_coref_kind(qkv_coref_word_id("她")), QKV_COREF_SHE);
    ck_assert_int_eq(qkv_coref_kind(0), QKV_COREF_PAD);
    ck_assert_int_eq(qkv_coref_word_id("<pad>"), -1); /* never a real word */
    ck_assert_int_eq(qkv_coref_classes(), 12);
    for (int c = 0; c < 12; c++)
        ck_assert_int_eq(qkv_coref_class_of(qkv_coref_name_id(c)), c);
    ck_assert_int_eq(qkv_coref_class_of(qkv_coref_word_id("他")), -1);
    ck_assert_ptr_null(qkv_coref_word(qkv_coref_vocab_size()));
}
END_TEST

START_TEST(test_tokenizer_splits_the_tutorial_sentence)
{
    const char *want[] = {"小明", "是", "个", "运动达人", "，",  "他",
                          "平时", "很", "爱", "打",       "篮球"};
    int ids[QKV_COREF_MAX_TOKENS], n;
    qkv_error err = qkv_error_none();
    ck_assert_int_eq(qkv_coref_tokenize("小明是个运动达人，他平时很爱打篮球", ids,
                                        QKV_COREF_MAX_TOKENS, &n, &err),
                     QKV_OK);
    ck_assert_int_eq(n, 11);
    for (int i = 0; i < n; i++)
        ck_assert_str_eq(qkv_coref_word(ids[i]), want[i]);
    /* ASCII spaces are skipped */
    ck_assert_int_eq(qkv_coref_tokenize(" 小明 是 ", ids, QKV_COREF_MAX_TOKENS, &n, &err), QKV_OK);
    ck_assert_int_eq(n, 2);
    /* and so is the ideographic space U+3000, which a Chinese input method
     * types in full-width mode: it was an invisible "unknown word" */
    ck_assert_int_eq(qkv_coref_tokenize("小明是个运动达人，\u3000他平时很爱打篮球\u3000", ids,
                                        QKV_COREF_MAX_TOKENS, &n, &err),
                     QKV_OK);
    ck_assert_int_eq(n, 11);
    for (int i = 0; i < n; i++)
        ck_assert_str_eq(qkv_coref_word(ids[i]), want[i]);
    /* the offset of a later unknown word counts the space as a character */
    ck_assert_int_eq(qkv_coref_tokenize("小明\u3000排球", ids, QKV_COREF_MAX_TOKENS, &n, &err),
                     QKV_ERR_FORMAT);
    ck_assert_str_eq(err.message, "unknown word \"排球\" at character 3");
    ck_assert_int_eq(qkv_coref_tokenize("小明排球\u3000他", ids, QKV_COREF_MAX_TOKENS, &n, &err),
                     QKV_ERR_FORMAT);
    ck_assert_str_eq(err.message, "unknown word \"排球\" at character 2");
    /* every ASCII white space is skipped, \v and \f as \t is, and ends
     * the word an error quotes: it quoted "排球\x09" with the tab */
    ck_assert_int_eq(qkv_coref_tokenize("\v小明\f\t\r\n他 ", ids, QKV_COREF_MAX_TOKENS, &n, &err),
                     QKV_OK);
    ck_assert_int_eq(n, 2);
    static const char *const after[] = {"\t", "\n", "\v", "\f", "\r"};
    for (size_t i = 0; i < sizeof after / sizeof after[0]; i++) {
        char text[64];
        snprintf(text, sizeof text, "小明排球%s他", after[i]);
        ck_assert_int_eq(qkv_coref_tokenize(text, ids, QKV_COREF_MAX_TOKENS, &n, &err),
                         QKV_ERR_FORMAT);
        ck_assert_str_eq(err.message, "unknown word \"排球\" at character 2");
    }
}
END_TEST

START_TEST(test_tokenizer_rejects_invalid_utf8_with_its_offset)
{
    static const struct {
        const char *text;
        const char *msg;
    } bad[] = {
        {"小明\x80", "invalid UTF-8 at byte 6"},         /* stray continuation byte */
        {"\xC0\xAF", "invalid UTF-8 at byte 0"},         /* overlong '/' */
        {"他\xED\xA0\x80", "invalid UTF-8 at byte 3"},   /* UTF-16 surrogate */
        {"他\xE4\xB8", "invalid UTF-8 at byte 3"},       /* truncated sequence */
        {"\xF4\x90\x80\x80", "invalid UTF-8 at byte 0"}, /* above U+10FFFF */
        {"\xFF", "invalid UTF-8 at byte 0"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int ids[8], n;
        qkv_error err = qkv_error_none();
        ck_assert_int_eq(qkv_coref_tokenize(bad[i].text, ids, 8, &n, &err), QKV_ERR_FORMAT);
        ck_assert_str_eq(err.message, bad[i].msg);
    }
    size_t off = 99;
    ck_assert(qkv_utf8_valid("\xF0\x9F\x98\x80", 4, &off)); /* U+1F600 is fine */
    ck_assert(!qkv_utf8_valid("ab\xE0\x80\x80", 5, &off));  /* overlong 3-byte NUL */
    ck_assert_uint_eq(off, 2);
    /* a lead byte where a continuation byte (10xxxxxx) must be */
    ck_assert(!qkv_utf8_valid("a\xC3\xC3", 3, &off));
    ck_assert_uint_eq(off, 1);
}
END_TEST

/* qkv_utf8_next decodes one character: the code points CPython gives
 * for "他→小明😀a" ([hex(ord(c)) for c in s], lengths from c.encode()),
 * every code point encoded by RFC 3629's table and decoded back, and 0
 * for what qkv_utf8_valid refuses. */
START_TEST(test_utf8_next_decodes_one_character)
{
    static const char text[] = "他→小明😀a";
    static const uint32_t cps[] = {0x4ed6, 0x2192, 0x5c0f, 0x660e, 0x1f600, 0x61};
    static const size_t lens[] = {3, 3, 3, 3, 4, 1};
    size_t at = 0;
    for (int i = 0; i < 6; i++) {
        uint32_t cp = 0;
        ck_assert_uint_eq(qkv_utf8_next(text + at, sizeof text - 1 - at, &cp), lens[i]);
        ck_assert_uint_eq(cp, cps[i]);
        at += lens[i];
    }
    ck_assert_uint_eq(at, sizeof text - 1);
    for (uint32_t c = 0; c <= 0x10FFFF; c++) {
        if (c >= 0xD800 && c <= 0xDFFF)
            continue;
        unsigned char b[4];
        size_t n;
        if (c < 0x80) {
            b[0] = (unsigned char)c, n = 1;
        } else if (c < 0x800) {
            b[0] = (unsigned char)(0xC0 | c >> 6), b[1] = (unsigned char)(0x80 | (c & 0x3F)), n = 2;
        } else if (c < 0x10000) {
            b[0] = (unsigned char)(0xE0 | c >> 12);
            b[1] = (unsigned char)(0x80 | (c >> 6 & 0x3F));
            b[2] = (unsigned char)(0x80 | (c & 0x3F)), n = 3;
        } else {
            b[0] = (unsigned char)(0xF0 | c >> 18);
            b[1] = (unsigned char)(0x80 | (c >> 12 & 0x3F));
            b[2] = (unsigned char)(0x80 | (c >> 6 & 0x3F));
            b[3] = (unsigned char)(0x80 | (c & 0x3F)), n = 4;
        }
        /* plain ifs: a ck_assert per code point reports to Check's parent
         * process each time, a million times */
        uint32_t cp = 0xFFFFFFFFu;
        if (qkv_utf8_next((const char *)b, n, &cp) != n || cp != c)
            ck_abort_msg("U+%04X decodes as %zu bytes, U+%04X", (unsigned)c,
                         qkv_utf8_next((const char *)b, n, &cp), (unsigned)cp);
        if (qkv_utf8_next((const char *)b, n - 1, &cp) != 0) /* one byte short */
            ck_abort_msg("U+%04X cut to %zu bytes decodes", (unsigned)c, n - 1);
    }
    /* overlong, a surrogate, above U+10FFFF, a stray continuation byte, a
     * lead byte where a continuation must be; NULL and empty text */
    static const char *const bad[] = {"\xC0\x80",         "\xE0\x80\x80", "\xED\xA0\x80",
                                      "\xF4\x90\x80\x80", "\x80",         "\xC3\xC3"};
    for (int i = 0; i < 6; i++) {
        uint32_t cp = 7;
        ck_assert_uint_eq(qkv_utf8_next(bad[i], strlen(bad[i]), &cp), 0);
        ck_assert_uint_eq(cp, 7); /* untouched */
        ck_assert(!qkv_utf8_valid(bad[i], strlen(bad[i]), NULL));
    }
    uint32_t cp = 7;
    ck_assert_uint_eq(qkv_utf8_next(NULL, 3, &cp), 0);
    ck_assert_uint_eq(qkv_utf8_next("a", 0, &cp), 0);
    ck_assert_uint_eq(cp, 7);
    ck_assert_uint_eq(qkv_utf8_next("ab", 2, NULL), 1); /* the length alone */
}
END_TEST

/* base.h's checks of bytes take NULL where a caller has no bytes to give:
 * as text it is empty (n = 0) or invalid at offset 0, and as data for a
 * CRC it adds nothing, where both read through it before. */
START_TEST(test_utf8_and_crc_take_null_bytes)
{
    size_t off = 99;
    ck_assert(qkv_utf8_valid(NULL, 0, &off));
    ck_assert(!qkv_utf8_valid(NULL, 3, &off));
    ck_assert_uint_eq(off, 0);
    ck_assert(!qkv_utf8_valid(NULL, 3, NULL));
    /* "123456789" is the CRC-32 check input: 0xcbf43926 (zlib.crc32) */
    const uint32_t c = qkv_crc32(0, "123456789", 9);
    ck_assert_uint_eq(c, 0xcbf43926u);
    ck_assert_uint_eq(qkv_crc32(c, NULL, 5), c);
    ck_assert_uint_eq(qkv_crc32(0, NULL, 0), 0);
}
END_TEST

/* A message longer than qkv_error's buffer keeps its start (what failed)
 * and its end (usually why: "No such file or directory"), with "..."
 * between them, and cuts no character of UTF-8 in two. */
START_TEST(test_a_long_error_message_keeps_its_start_and_end)
{
    char path[400];
    memset(path, 'a', sizeof path - 1);
    memcpy(path + 100, "小明小明", 12); /* 3-byte characters where a cut may fall */
    memcpy(path + 250, "小明小明", 12);
    path[sizeof path - 1] = '\0';
    qkv_error err = qkv_error_none();
    ck_assert_int_eq(qkv_error_set(&err, QKV_ERR_IO, "cannot open %s: %s", path, "No such file"),
                     QKV_ERR_IO);
    const size_t n = strlen(err.message);
    ck_assert_uint_lt(n, sizeof err.message);
    ck_assert_uint_ge(n, sizeof err.message - 8); /* the room is used */
    ck_assert_msg(strncmp(err.message, "cannot open aaaa", 16) == 0, "%s", err.message);
    ck_assert_msg(strstr(err.message, "...") != NULL, "%s", err.message);
    ck_assert_msg(n > 20 && strcmp(err.message + n - 20, "aaaaaa: No such file") == 0, "%s",
                  err.message);
    /* whole characters only: every byte sequence is valid UTF-8 */
    for (size_t i = 0; i < n;) {
        const unsigned char c = (unsigned char)err.message[i];
        size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : 4;
        ck_assert_msg(c < 0x80 || (c & 0xc0) == 0xc0, "a cut character at %zu: %s", i, err.message);
        for (size_t k = 1; k < len; k++)
            ck_assert_msg(i + k < n && (err.message[i + k] & 0xc0) == 0x80, "%s", err.message);
        i += len;
    }
    /* a message that fits is left whole */
    qkv_error_set(&err, QKV_ERR_IO, "cannot open %s: %s", "x", "No such file");
    ck_assert_str_eq(err.message, "cannot open x: No such file");
}
END_TEST

/* qkv_escape writes at most cap bytes, its NUL included: text that does
 * not fit stops short, whole characters and escapes only */
START_TEST(test_escape_stays_within_its_buffer)
{
    char buf[16];
    memset(buf, 'Z', sizeof buf);
    ck_assert_uint_eq(qkv_escape(buf, 4, "abcdef"), 3);
    ck_assert_str_eq(buf, "abc");
    ck_assert_int_eq(buf[4], 'Z');
    memset(buf, 'Z', sizeof buf); /* "\\u{feff}" is 8 bytes, with no room for the NUL */
    ck_assert_uint_eq(qkv_escape(buf, 8, "\xEF\xBB\xBF"), 0);
    ck_assert_str_eq(buf, "");
    ck_assert_int_eq(buf[8], 'Z');
    memset(buf, 'Z', sizeof buf);
    ck_assert_uint_eq(qkv_escape(buf, 9, "\xEF\xBB\xBF"), 8);
    ck_assert_str_eq(buf, "\\u{feff}");
    ck_assert_int_eq(buf[9], 'Z');
    /* public since the examples escape what they echo: NULLs are no crash */
    memset(buf, 'Z', sizeof buf);
    ck_assert_uint_eq(qkv_escape(buf, sizeof buf, NULL), 0);
    ck_assert_str_eq(buf, "");
    ck_assert_uint_eq(qkv_escape(NULL, 16, "abc"), 0);
    ck_assert_uint_eq(qkv_escape(buf, 0, "abc"), 0);
    ck_assert_int_eq(buf[0], '\0');
}
END_TEST

/* qkv_escape_elided keeps a third of the room for the start: with cap
 * 16, room = 16 - 1 - 3 ("...") = 12, a start of 12/3 = 4 bytes and an
 * end of 8; a start that would cut 小 (bytes 2 to 4) in two backs up to
 * the character's first byte, and the end stays 8 bytes. */
START_TEST(test_escape_elided_keeps_a_third_for_the_start)
{
    char buf[16], work[128];
    ck_assert_uint_eq(
        qkv_escape_elided(buf, sizeof buf, "abcdefghijklmnopqrstuvwxyz", work, sizeof work), 15);
    ck_assert_str_eq(buf, "abcd...stuvwxyz");
    ck_assert_uint_eq(
        qkv_escape_elided(buf, sizeof buf, "ab小cdefghijklmnopqrstuvwxyz", work, sizeof work), 13);
    ck_assert_str_eq(buf, "ab...stuvwxyz");
    /* text that fits is copied whole */
    ck_assert_uint_eq(qkv_escape_elided(buf, sizeof buf, "abcdefghijklmno", work, sizeof work), 15);
    ck_assert_str_eq(buf, "abcdefghijklmno");
}
END_TEST

START_TEST(test_tokenizer_quotes_an_unknown_word_and_its_offset)
{
    int ids[QKV_COREF_MAX_TOKENS], n;
    qkv_error err = qkv_error_none();
    ck_assert_int_eq(qkv_coref_tokenize("小明是个运动达人，他平时很爱打排球", ids,
                                        QKV_COREF_MAX_TOKENS, &n, &err),
                     QKV_ERR_FORMAT);
    ck_assert_str_eq(err.message, "unknown word \"排球\" at character 15");
    ck_assert_int_eq(qkv_coref_tokenize("小明 hello 他", ids, QKV_COREF_MAX_TOKENS, &n, &err),
                     QKV_ERR_FORMAT);
    ck_assert_str_eq(err.message, "unknown word \"hello\" at character 3");
    /* a quote or backslash in the word is escaped, so the quotes still
     * delimit it */
    ck_assert_int_eq(qkv_coref_tokenize("小明说\"他", ids, QKV_COREF_MAX_TOKENS, &n, &err),
                     QKV_ERR_FORMAT);
    ck_assert_str_eq(err.message, "unknown word \"\\\"\" at character 3");
    ck_assert_int_eq(qkv_coref_tokenize("小明 a\\b 他", ids, QKV_COREF_MAX_TOKENS, &n, &err),
                     QKV_ERR_FORMAT);
    ck_assert_str_eq(err.message, "unknown word \"a\\\\b\" at character 3");
    /* ASCII punctuation, as an English keyboard types it, is not the
     * vocabulary's full-width mark: the message names the one to write */
    ck_assert_int_eq(qkv_coref_tokenize("小明是个运动达人,他平时很爱打篮球.", ids,
                                        QKV_COREF_MAX_TOKENS, &n, &err),
                     QKV_ERR_FORMAT);
    ck_assert_str_eq(err.message,
                     "unknown word \",\" at character 8 (write the full-width \"，\")");
    ck_assert_int_eq(qkv_coref_tokenize("他很爱唱歌.", ids, QKV_COREF_MAX_TOKENS, &n, &err),
                     QKV_ERR_FORMAT);
    ck_assert_str_eq(err.message,
                     "unknown word \".\" at character 5 (write the full-width \"。\")");
    ck_assert_int_eq(qkv_coref_tokenize("他很爱唱歌!", ids, QKV_COREF_MAX_TOKENS, &n, &err),
                     QKV_ERR_FORMAT);
    ck_assert_str_eq(err.message,
                     "unknown word \"!\" at character 5 (write the full-width \"！\")");
    ck_assert_int_eq(qkv_coref_tokenize("他他他", ids, 2, &n, &err), QKV_ERR_ARG);
}
END_TEST

/* A long unknown word is quoted by whole characters, as many as fit the
 * 128-byte buffer with its NUL: "zz" then 3-byte characters leave it at
 * 2 + 41 * 3 = 125 bytes, since one more would make 128 and leave no room
 * for the NUL; never 2 bytes of a 3-byte character. */
START_TEST(test_a_long_unknown_word_is_cut_at_a_whole_character)
{
    char text[256] = "小明zz", want[256] = "unknown word \"zz";
    for (int i = 0; i < 50; i++)
        strcat(text, "龙");
    for (int i = 0; i < 41; i++)
        strcat(want, "龙");
    strcat(want, "\" at character 2");
    int ids[QKV_COREF_MAX_TOKENS], n;
    qkv_error err = qkv_error_none();
    ck_assert_int_eq(qkv_coref_tokenize(text, ids, QKV_COREF_MAX_TOKENS, &n, &err), QKV_ERR_FORMAT);
    ck_assert_str_eq(err.message, want);
}
END_TEST

/* The fingerprint that checkpoints store is the CRC-32 of every word, its
 * NUL and its kind's byte, in id order; CPython computes it from the table
 * in vocab.c as
 *     crc = 0
 *     for w, k in vocab:
 *         crc = zlib.crc32(w.encode() + b"\0", crc)
 *         crc = zlib.crc32(bytes([k]), crc)
 * A change here makes every saved model unreadable, so it is made on
 * purpose or not at all. */
START_TEST(test_the_vocabulary_fingerprint_is_pinned)
{
    ck_assert_uint_eq(qkv_coref_fingerprint(), 0x70d012cau);
}
END_TEST

static int same_example(const qkv_coref_example *a, const qkv_coref_example *b)
{
    return a->len == b->len && a->pronoun == b->pronoun && a->tmpl == b->tmpl &&
           memcmp(a->ids, b->ids, sizeof(int) * (size_t)a->len) == 0;
}

START_TEST(test_generator_is_deterministic_for_a_seed)
{
    qkv_coref_data a, b, c;
    ck_assert_int_eq(qkv_coref_data_build(&a, 7, 5, NULL), QKV_OK);
    ck_assert_int_eq(qkv_coref_data_build(&b, 7, 5, NULL), QKV_OK);
    ck_assert_int_eq(qkv_coref_data_build(&c, 7, 6, NULL), QKV_OK);
    ck_assert_int_eq(a.n_train, b.n_train);
    ck_assert_int_eq(a.n_val, c.n_val);
    for (int i = 0; i < a.n_train; i++)
        ck_assert(same_example(&a.train[i], &b.train[i]));
    int differ = 0;
    for (int i = 0; i < a.n_val; i++)
        differ += !same_example(&a.val[i], &c.val[i]);
    ck_assert_int_gt(differ, 0);
    qkv_coref_data_free(&a);
    qkv_coref_data_free(&b);
    qkv_coref_data_free(&c);
    qkv_coref_data_free(NULL);
}
END_TEST

START_TEST(test_splits_are_disjoint_and_test_templates_unseen)
{
    qkv_coref_data d;
    ck_assert_int_eq(qkv_coref_data_build(&d, 7, 1, NULL), QKV_OK);
    ck_assert_int_gt(d.n_train, 0);
    ck_assert_int_gt(d.n_val, 0);
    ck_assert_int_gt(d.n_test, 0);
    for (int i = 0; i < d.n_val; i++)
        for (int j = 0; j < d.n_train; j++)
            ck_assert(!same_example(&d.val[i], &d.train[j]));
    for (int i = 0; i < d.n_test; i++)
        for (int j = 0; j < d.n_train; j++)
            ck_assert_int_ne(d.test[i].tmpl, d.train[j].tmpl);
    /* validation uses training templates */
    for (int i = 0; i < d.n_val; i++) {
        int seen = 0;
        for (int j = 0; j < d.n_train && !seen; j++)
            seen = d.val[i].tmpl == d.train[j].tmpl;
        ck_assert(seen);
    }
    qkv_coref_data_free(&d);
    ck_assert_int_eq(qkv_coref_data_build(&d, 0, 1, NULL), QKV_ERR_ARG);
    /* a set with a bit past level 3 is refused, not built from its known
     * levels: 1 | 8 = 0x9 */
    qkv_error err = qkv_error_none();
    ck_assert_int_eq(qkv_coref_data_build(&d, 1u | 8u, 1, &err), QKV_ERR_ARG);
    ck_assert_str_eq(err.message, "data: level set 0x9 is not a set of 1, 2, 3");
    ck_assert_int_eq(d.n_train + d.n_val + d.n_test, 0);
}
END_TEST

START_TEST(test_examples_follow_their_level)
{
    qkv_coref_data d;
    ck_assert_int_eq(qkv_coref_data_build(&d, 7, 1, NULL), QKV_OK);
    int per_level[4] = {0}, cataphora = 0;
    const qkv_coref_example *sets[3] = {d.train, d.val, d.test};
    int sizes[3] = {d.n_train, d.n_val, d.n_test};
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < sizes[s]; i++) {
            const qkv_coref_example *e = &sets[s][i];
            qkv_coref_word_kind pk = qkv_coref_kind(e->ids[e->pronoun]);
            qkv_coref_word_kind ak = qkv_coref_kind(e->antecedent);
            ck_assert(pk == (ak == QKV_COREF_MALE ? QKV_COREF_HE : QKV_COREF_SHE));
            ck_assert_int_eq(e->target, qkv_coref_class_of(e->antecedent));
            int names = 0, other_gender = 0, first_name = -1;
            for (int j = 0; j < e->len; j++) {
                qkv_coref_word_kind k = qkv_coref_kind(e->ids[j]);
                if (k == QKV_COREF_MALE || k == QKV_COREF_FEMALE) {
                    names++;
                    other_gender += k != ak;
                    first_name = first_name < 0 ? j : first_name;
                }
            }
            ck_assert_int_eq(other_gender > 0, e->level >= 2);
            if (e->level == 1)
                ck_assert_int_eq(names, 1);
            cataphora += e->pronoun < first_name;
            per_level[e->level]++;
            /* the text round-trips through the tokenizer */
            char text[512];
            qkv_error err = qkv_error_none();
            int ids[QKV_COREF_MAX_TOKENS], n;
            qkv_coref_example_text(e, text, sizeof text);
            ck_assert_int_eq(qkv_coref_tokenize(text, ids, QKV_COREF_MAX_TOKENS, &n, &err), QKV_OK);
            ck_assert_int_eq(n, e->len);
            ck_assert_int_eq(memcmp(ids, e->ids, sizeof(int) * (size_t)n), 0);
        }
    ck_assert_int_gt(per_level[1], 0);
    ck_assert_int_gt(per_level[2], 0);
    ck_assert_int_gt(per_level[3], 0);
    ck_assert_int_gt(cataphora, 0);
    qkv_coref_data_free(&d);
}
END_TEST

/* Item i of batch b matches example ex: its tokens, length, pronoun (the
 * query), class and antecedent (the mark). */
static int batch_holds(const qkv_coref_batch *b, int i, const qkv_coref_example *ex)
{
    if (b->len[i] != ex->len || b->query[i] != ex->pronoun || b->target[i] != ex->target ||
        b->mark[i] != ex->antecedent)
        return 0;
    for (int t = 0; t < ex->len; t++)
        if (b->ids[(size_t)i * b->cap_t + t] != ex->ids[t])
            return 0;
    return 1;
}

/* qkv_coref_draw_batch (the batches of qkv_coref_fit): each epoch is a
 * fresh permutation of the training split, every example once, batches
 * running across the epoch's end into the next permutation; the same seed
 * draws the same batches. */
START_TEST(test_batches_cover_each_epoch_once_and_reshuffle)
{
    qkv_coref_data d;
    ck_assert_int_eq(qkv_coref_data_build(&d, QKV_COREF_ALL_LEVELS, 1, NULL), QKV_OK);
    const int n = d.n_train, cap = 32;
    ck_assert_int_gt(n, cap);
    int *order = malloc(sizeof *order * (size_t)n), *first = malloc(sizeof *first * (size_t)n);
    int *seen = calloc((size_t)n, sizeof *seen);
    for (int i = 0; i < n; i++)
        order[i] = i;
    qkv_coref_batch *b = qkv_coref_batch_new(cap, QKV_COREF_MAX_TOKENS, NULL);
    qkv_rng g;
    qkv_rng_seed(&g, 2);
    int pos = 0, k = 0, reshuffled = 0;
    /* through the first epoch and one batch past it */
    while (k < n + cap) {
        qkv_coref_draw_batch(&g, b, d.train, order, n, &pos);
        ck_assert_int_eq(b->B, cap);
        if (k == 0)
            memcpy(first, order, sizeof *first * (size_t)n);
        for (int i = 0; i < cap; i++, k++) {
            if (k < n) { /* epoch 1: the first permutation, in order */
                ck_assert_msg(batch_holds(b, i, &d.train[first[k]]), "item %d of epoch 1", k);
                seen[first[k]]++;
            } else { /* epoch 2: the current permutation from its start */
                ck_assert_msg(batch_holds(b, i, &d.train[order[k - n]]), "item %d of epoch 2",
                              k - n);
            }
        }
    }
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(seen[i], 1);
        reshuffled |= order[i] != first[i];
    }
    ck_assert_msg(reshuffled, "the second epoch kept the first one's order");
    /* the same seed, the same first batch */
    for (int i = 0; i < n; i++)
        order[i] = i;
    qkv_rng_seed(&g, 2);
    pos = 0;
    qkv_coref_draw_batch(&g, b, d.train, order, n, &pos);
    for (int i = 0; i < cap; i++)
        ck_assert(batch_holds(b, i, &d.train[first[i]]));
    qkv_coref_batch_free(b);
    free(order);
    free(first);
    free(seen);
    qkv_coref_data_free(&d);
}
END_TEST

START_TEST(test_parse_levels)
{
    ck_assert_uint_eq(qkv_coref_parse_levels("1,2,3"), 7);
    ck_assert_uint_eq(qkv_coref_parse_levels("2"), 2);
    ck_assert_uint_eq(qkv_coref_parse_levels("1,3"), 5);
    ck_assert_uint_eq(qkv_coref_parse_levels("4"), 0);
    ck_assert_uint_eq(qkv_coref_parse_levels(""), 0);
    ck_assert_uint_eq(qkv_coref_parse_levels("1,"), 0);
    ck_assert_uint_eq(qkv_coref_parse_levels("12"), 0);
    /* levels are separated by commas and by nothing else */
    ck_assert_uint_eq(qkv_coref_parse_levels("1;2"), 0);
    ck_assert_uint_eq(qkv_coref_parse_levels("1 3"), 0);
    ck_assert_uint_eq(qkv_coref_parse_levels("2.3"), 0);
}
END_TEST

Suite *coref_data_suite(void)
{
    Suite *s = suite_create("coref_data");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_vocabulary_has_every_required_word_and_gender);
    tcase_add_test(tc, test_tokenizer_splits_the_tutorial_sentence);
    tcase_add_test(tc, test_tokenizer_rejects_invalid_utf8_with_its_offset);
    tcase_add_test(tc, test_utf8_next_decodes_one_character);
    tcase_add_test(tc, test_utf8_and_crc_take_null_bytes);
    tcase_add_test(tc, test_escape_stays_within_its_buffer);
    tcase_add_test(tc, test_escape_elided_keeps_a_third_for_the_start);
    tcase_add_test(tc, test_a_long_error_message_keeps_its_start_and_end);
    tcase_add_test(tc, test_tokenizer_quotes_an_unknown_word_and_its_offset);
    tcase_add_test(tc, test_a_long_unknown_word_is_cut_at_a_whole_character);
    tcase_add_test(tc, test_the_vocabulary_fingerprint_is_pinned);
    tcase_add_test(tc, test_generator_is_deterministic_for_a_seed);
    tcase_add_test(tc, test_splits_are_disjoint_and_test_templates_unseen);
    tcase_add_test(tc, test_examples_follow_their_level);
    tcase_add_test(tc, test_parse_levels);
    tcase_add_test(tc, test_batches_cover_each_epoch_once_and_reshuffle);
    suite_add_tcase(s, tc);
    return s;
}
