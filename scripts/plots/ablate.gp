# ablate.png: what each piece of the attention layer is for (qkv ablate).
# Left: the coreference task, per variant: test accuracy (± sd over seeds)
# and the pronoun's attention on its antecedent and on itself. Middle:
# steps to 90% validation accuracy (± sd over the seeds that got there).
# Right: the roles task (two heads, 「A喜欢B。」): held-out sentences with
# both names right, ± sd. The accuracy bars are cut at 0 and 1, and the
# steps' at 0, as distance.png's are (a few seeds' sd can pass them).
# Variables: infile (ablate/summary.csv), roles (ablate-roles/summary.csv,
# or "" to leave the right panel out), outfile.
load dir."/common.gp"
# steps to 90%: a variant that never got there (-1) has no bar but a
# label, and a run so short that none got there still draws the panel
stats infile using "steps_to_90_mean" nooutput
steps_max = STATS_max
set terminal pngcairo size 1900,700 font "WenQuanYi Zen Hei,12" enhanced
set output outfile
set multiplot layout 1,(roles eq "" ? 2 : 3) \
    title "消融实验：去掉 V、共用 Q 和 K、换 Softmax 的底数，各会怎样（误差棒：种子间标准差）" \
    font ",16"
set style data histograms
set style histogram errorbars gap 1 lw 1.5
set style fill solid 0.85 border -1
set boxwidth 0.9
set yrange [0:1.3]
set ytics 0, 0.2, 1
set xtics rotate by -35 nomirror
set key top center horizontal samplen 2
lo(v) = v < 0 ? 0 : v
hi(v) = v > 1 ? 1 : v
set title "指代任务（他 → 小明）：测试集准确率与注意力去向"
set ylabel "准确率 / 注意力权重"
plot infile using "acc_mean":(lo(column("acc_mean") - column("acc_sd"))) \
         :(hi(column("acc_mean") + column("acc_sd"))):xtic(stringcolumn("variant")) \
         lc rgb "#7f7f7f" title "测试准确率", \
     infile using "attn_antecedent_mean":(0) lc rgb c_scaled title "代词 → 先行词", \
     infile using "attn_self_mean":(0) lc rgb c_unscaled title "代词 → 自己"
set title "指代任务：验证准确率首次达到 90% 的步数"
set ylabel "训练步数"
set autoscale y
set yrange [0:*]
set ytics autofreq
unset key
if (steps_max <= 0) { set yrange [0:100] }
steps(v) = v < 0 ? 0 : v # never got there (-1): no bar
plot infile using (steps(column("steps_to_90_mean"))) \
         :(lo(steps(column("steps_to_90_mean")) - column("steps_to_90_sd"))) \
         :(steps(column("steps_to_90_mean")) + column("steps_to_90_sd")) \
         :xtic(stringcolumn("variant")) lc rgb c_scaled, \
     infile using ($0):(0):(column("steps_to_90_mean") < 0 ? "未达到" : "") \
         with labels rotate by 90 left offset 0,0.5
if (roles ne "") {
    set title "两个角色（A喜欢B。），两个头：留出的句子"
    set ylabel "留出句子的准确率"
    set yrange [0:1.3]
    set ytics 0, 0.2, 1
    set key top center horizontal
    plot roles using "both_mean":(lo(column("both_mean") - column("both_sd"))) \
             :(hi(column("both_mean") + column("both_sd"))):xtic(stringcolumn("variant")) \
             lc rgb c_scaled title "A、B 都对", \
         roles using "a_mean":(0) lc rgb "#9ecae1" title "A 对", \
         roles using "b_mean":(0) lc rgb "#fdae6b" title "B 对"
}
unset multiplot
