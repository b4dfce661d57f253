/*
 * main.c - the qkv program: dispatches to one subcommand per file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *about;
    const char *memory; /* what lowers its memory, if it runs out (NULL: none) */
} command;

static const command commands[] = {
    {"demo", cmd_demo, "reproduce the tutorial's Python self-attention demo",
     "try a smaller --d-model, --seq-len or --d-k"},
    {"gradcheck", cmd_gradcheck, "check every op's gradient against finite differences", NULL},
    {"train", cmd_train, "train Wq, Wk, Wv on the coreference task (他 -> 小明)",
     "try a smaller --batch or --d-k"},
    {"eval", cmd_eval, "accuracy of a trained model per split and level",
     "try a model trained with a smaller --d-k"},
    {"resolve", cmd_resolve, "show whom each pronoun in a sentence refers to",
     "try a model trained with a smaller --d-k"},
    {"softmax", cmd_softmax, "linear against exponential normalisation (the tutorial's table)",
     NULL},
    {"saturation", cmd_saturation, "measure softmax saturation with and without sqrt(d_k)",
     "try a smaller --batch or --dk, or fewer --jobs"},
    {"distance", cmd_distance, "RNN, LSTM, GRU and attention as the pronoun moves away",
     "try a smaller --batch or --distances, or fewer --jobs"},
    {"bptt", cmd_bptt, "gradient norms through time against the recurrence's radius",
     "try a smaller --batch or --length"},
    {"parallel", cmd_parallel, "critical path and step time against sequence length",
     "try a smaller --batch or --lengths"},
    {"ablate", cmd_ablate, "why V, why Q and K, why e: train without each, compare",
     "try a smaller --batch or --d-k, or fewer --jobs"},
    {"inspect", cmd_inspect, "what a safetensors file holds: metadata, tensors, their values",
     "the file and its largest tensor must fit in memory"},
};

#define N_COMMANDS ((int)(sizeof commands / sizeof commands[0]))

static void usage(FILE *out)
{
    fprintf(out, "Usage: qkv <command> [options]\n\n"
                 "qkv trains self-attention's Wq, Wk and Wv with a small tape-based\n"
                 "autodiff engine, on the tutorial's own example (他 -> 小明).\n\n"
                 "Commands:\n");
    for (int i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-12s %s\n", commands[i].name, commands[i].about);
    fprintf(out, "\nRun 'qkv <command> --help' (or 'qkv help <command>') for a command's "
                 "options,\n'qkv --version' for the version.\n");
}

/* Ends the program: a command that succeeded but whose output could not
 * all be written (a full disk, a closed pipe, /dev/full) fails after all. */
static int finish(int r)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "qkv: cannot write the output: %s\n", strerror(errno));
        return r == CLI_OK || r == CLI_HELP ? CLI_FAIL : r;
    }
    return r == CLI_HELP ? CLI_OK : r;
}

static int run(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    const char *name = argv[1];
    const int help =
        strcmp(name, "help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0;
    if (help && argc > 2) { /* qkv help CMD (or --help CMD): qkv CMD --help */
        if (argc > 3)
            return cli_usage_error("", "help takes one command, not '%s'", argv[3]);
        if (strcmp(argv[2], "help") == 0 || strcmp(argv[2], "-h") == 0 ||
            strcmp(argv[2], "--help") == 0) { /* qkv help help: this help */
            usage(stdout);
            return CLI_OK;
        }
        for (int i = 0; i < N_COMMANDS; i++)
            if (strcmp(argv[2], commands[i].name) == 0) {
                char *help[] = {argv[2], "--help", NULL};
                return commands[i].run(2, help);
            }
        return cli_usage_error("", "unknown command '%s'", argv[2]);
    }
    if (help) {
        usage(stdout);
        return CLI_OK;
    }
    if (strcmp(name, "--version") == 0) {
        if (argc > 2) /* not ignored: "qkv --version --bogus" is a mistake */
            return cli_usage_error("", "--version takes no arguments, not '%s'", argv[2]);
        printf("qkv %s\n", QKV_VERSION);
        return CLI_OK;
    }
    for (int i = 0; i < N_COMMANDS; i++)
        if (strcmp(name, commands[i].name) == 0) {
            cli_memory_advice(commands[i].memory);
            return commands[i].run(argc - 1, argv + 1); /* cli_parse checks the env */
        }
    return cli_usage_error("", "unknown command '%s'", name);
}

int main(int argc, char **argv)
{
    cli_remove_partial_on_signals(); /* Ctrl-C leaves no CSV cut short */
    const int r = finish(run(argc, argv));
    if (r != CLI_OK) /* nor a failure an empty directory it made */
        cli_remove_made_dirs();
    return r;
}
