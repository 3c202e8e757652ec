#!/usr/bin/perl
# SpamAssassin's local rule hits for messages, as a second opinion when looking for new rules:
# which of its (offline) tests hit the spam shrike misses, and how often each hits ham.
#
#   apt-get install -y --no-install-recommends spamassassin
#   find CORPUS -type f | sort | perl scripts/sa_hits.pl > sa.tsv   # file, score, tests
#
# Network tests, Bayes and the auto-welcome list are off. SpamAssassin is not a dependency of
# shrike; its rules are not copied (they inspire ours, which are written against our view).
use strict; use warnings;
my $dir = '/tmp/sa-hits'; mkdir $dir; open(my $p, '>', "$dir/user_prefs"); close $p;
use Mail::SpamAssassin;
my $sa = Mail::SpamAssassin->new({ local_tests_only => 1, dont_copy_prefs => 1,
  userprefs_filename => "$dir/user_prefs", userstate_dir => "$dir/state",
  post_config_text => "use_bayes 0\nuse_auto_whitelist 0\nskip_rbl_checks 1\n" });
$sa->compile_now(0);
while (my $f = <STDIN>) { chomp $f;
  open(my $fh, '<', $f) or next; local $/; my $raw = <$fh>; close $fh;
  my $m = $sa->parse($raw); my $s = $sa->check($m);
  my @t = split /,/, $s->get_names_of_tests_hit;
  print join("\t", $f, sprintf("%.1f",$s->get_score), join(",", @t)), "\n";
  $s->finish; $m->finish;
}
