# ablate.png: what each piece of the attention layer is for (qkv ablate).
# Left: the coreference task, per variant: test accuracy and the pronoun's
# attention on its antecedent and on itself. Right: the roles task (two
# heads, 「A喜欢B。」): held-out sentences with both names right, ± sd.
# Variables: infile (ablate/summary.csv), roles (ablate-roles/summary.csv,
# or "" to leave the right panel out), outfile.
load dir."/common.gp"
set terminal pngcairo size 1600,700 font "WenQuanYi Zen Hei,12" enhanced
set output outfile
set multiplot layout 1,(roles eq "" ? 1 : 2) \
    title "消融实验：去掉 V、共用 Q 和 K、换 Softmax 的底数，各会怎样" font ",16"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set yrange [0:1.3]
set ytics 0, 0.2, 1
set xtics rotate by -35 nomirror
set key top center horizontal
set title "指代任务（他 → 小明）：测试集准确率与注意力去向"
plot infile using "acc_mean":xtic(stringcolumn("variant")) lc rgb "#7f7f7f" \
         title "测试准确率", \
     infile using "attn_antecedent_mean" lc rgb c_scaled title "代词 → 先行词的注意力", \
     infile using "attn_self_mean" lc rgb c_unscaled title "代词 → 自己的注意力"
if (roles ne "") {
    set title "两个角色（A喜欢B。）：两头注意力，留出的句子两名都答对的比例"
    set style histogram errorbars gap 1 lw 1.5
    set key top center horizontal
    plot roles using "both_mean":"both_sd":xtic(stringcolumn("variant")) lc rgb c_scaled \
             title "A 和 B 都对（±标准差）", \
         roles using "a_mean":(0) lc rgb "#9ecae1" title "A（喜欢者）对", \
         roles using "b_mean":(0) lc rgb "#fdae6b" title "B（被喜欢者）对"
}
unset multiplot
