#!/usr/bin/perl
# A zone's files (state=, overrides_file=) are its own, one for each use:
# `nginx -t` refuses one file for two zones, one file as a zone's state=
# and an overrides_file= (its own or another zone's), and a file nginx
# writes (the error log, given by error_log or -e, wherever error_log
# stands; an access log; the pid file), naming both places and what is
# allowed.  Names are compared resolved: a relative one from the prefix, a
# directory through "..", "." and symbolic links.  Distinct files pass.
# A FIFO as redis_password_file= is refused at once.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use POSIX ();
use Test::More;
use Time::HiRes qw(time);
use RLTest;

my $t = RLTest->new();
my $p = $t->prefix;
mkdir "$p/st" or die;
symlink($p, "$p/link") or die;

my $allowed = qr/are one file: expected a file of its own for each zone's state= and overrides_file=/;
my $written = qr/a file nginx writes \(an error_log, an access_log, the pid file\): expected a file of its own for each zone's state= and overrides_file=/;
my $site = qr/\(in \Q$p\E\/test-\d+\.conf:\d+\)/;

sub server { "server {\n    listen 127.0.0.1:%%PORT%%;\n$_[0]\n}\n" }

$t->conf_refused("ratelimit_zone a 1m overrides_file=$p/ov;\nratelimit_zone b 1m overrides_file=$p/ov;\n",
                 qr/"ratelimit_zone" directive: overrides_file=\Q$p\E\/ov of zone "a" $site and overrides_file=\Q$p\E\/ov of zone "b" $site $allowed/,
                 'one overrides_file for two zones');
$t->conf_refused("ratelimit_zone a 1m overrides_file=ov;\nratelimit_zone b 1m overrides_file=$p/st/../ov;\n",
                 qr/overrides_file=\Q$p\E\/ov of zone "a" $site and overrides_file=\Q$p\E\/st\/..\/ov of zone "b" $site $allowed/,
                 'the same, one name relative to the prefix and the other through ..');
$t->conf_refused("ratelimit_zone a 1m overrides_file=$p/ov;\nratelimit_zone b 1m overrides_file=$p/link/./ov;\n",
                 qr/overrides_file=\Q$p\E\/ov of zone "a" $site and overrides_file=\Q$p\E\/link\/.\/ov of zone "b" $site $allowed/,
                 'the same, through a link to its directory');
$t->conf_refused("ratelimit_zone a 1m state=$p/x overrides_file=$p/x;\n",
                 qr/state=\Q$p\E\/x of zone "a" $site and overrides_file=\Q$p\E\/x of zone "a" $site $allowed/,
                 "one file as a zone's state= and its overrides_file=");
$t->conf_refused("ratelimit_zone a 1m state=$p/x;\nratelimit_zone b 1m overrides_file=$p/x;\n",
                 qr/state=\Q$p\E\/x of zone "a" $site and overrides_file=\Q$p\E\/x of zone "b" $site $allowed/,
                 "one zone's state= as another's overrides_file=");
$t->conf_refused("ratelimit_zone a 1m state=$p/a.state;\nratelimit_zone b 1m state=$p/a.state;\n",
                 qr/state=\Q$p\E\/a.state of zone "a" $site and state=\Q$p\E\/a.state of zone "b" $site $allowed/,
                 'one state file for two zones');

# the files nginx writes
$t->conf_refused("ratelimit_zone a 1m overrides_file=$p/error.log;\n",
                 qr/overrides_file=\Q$p\E\/error.log of zone "a" $site is "\Q$p\E\/error.log", $written/,
                 'overrides_file= naming the error log');
$t->conf_refused("ratelimit_zone a 1m state=error.log;\n",
                 qr/state=\Q$p\E\/error.log of zone "a" $site is "\Q$p\E\/error.log", $written/,
                 'state= naming it by a relative name');
$t->conf_refused("ratelimit_zone a 1m overrides_file=$p/access.log;\n",
                 qr/overrides_file=\Q$p\E\/access.log of zone "a" $site is "\Q$p\E\/access.log", $written/,
                 'overrides_file= naming the access log');
$t->conf_refused("ratelimit_zone a 1m overrides_file=$p/api.log;\n"
                 . server("location / { access_log $p/api.log; }"),
                 qr/overrides_file=\Q$p\E\/api.log of zone "a" $site is "\Q$p\E\/api.log", $written/,
                 "a location's access log, declared after the zone");
$t->conf_refused("ratelimit_zone a 1m state=$p/nginx.pid;\n",
                 qr/state=\Q$p\E\/nginx.pid of zone "a" $site is "\Q$p\E\/nginx.pid", $written/,
                 'state= naming the pid file');

# an error_log after the http block, read once the zone is
{
    my $text = $t->conf_text("ratelimit_zone a 1m overrides_file=$p/late.log;\n") . "error_log $p/late.log;\n";
    my ($rc, $out) = $t->nginx_t($text);
    isnt($rc, 0, 'nginx -t fails: an error_log after the http block');
    like($out, qr/overrides_file=\Q$p\E\/late.log of zone "a" $site is "\Q$p\E\/late.log", $written/,
         'nginx -t names it: an error_log after the http block');
}

# the error log given by -e only
{
    my $text = $t->conf_text("ratelimit_zone a 1m overrides_file=$p/e.log;\n");
    $text =~ s/^error_log .*\n//m or die;
    my $file = "$p/test-e.conf";
    RLTest::write_file($file, $text);
    my $preload = $ENV{RL_PRELOAD} ? "LD_PRELOAD=$ENV{RL_PRELOAD} " : '';
    my $out = `$preload${\ $t->nginx} -t -p $p/ -c $file -e $p/e.log 2>&1`;
    isnt($? >> 8, 0, 'nginx -t fails: the error log of -e');
    like($out, qr/overrides_file=\Q$p\E\/e.log of zone "a" \(in \Q$file\E:\d+\) is "\Q$p\E\/e.log", $written/,
         'nginx -t names it: the error log of -e');
}

# a FIFO as redis_password_file= (read at nginx -t and at each reload):
# refused at once, not waited on
{
    POSIX::mkfifo("$p/fifo", 0600) or die;
    my $text = $t->conf_text("ratelimit_zone r 1m redis=127.0.0.1:6379 redis_password_file=$p/fifo;\n");
    RLTest::write_file("$p/fifo.conf", $text);
    my $at = time;
    my $preload = $ENV{RL_PRELOAD} ? "LD_PRELOAD=$ENV{RL_PRELOAD} " : '';
    my $out = `timeout 10 env $preload${\ $t->nginx} -t -p $p/ -c $p/fifo.conf -e $p/test-error.log 2>&1`;
    my $took = time - $at;
    isnt($? >> 8, 0, 'nginx -t fails: a FIFO as redis_password_file=');
    ok($took < 5, "at once ($took s)");
    like($out, qr/"redis_password_file=\Q$p\E\/fifo" of zone "r": cannot open "\Q$p\E\/fifo": it is not a regular file/,
         'nginx -t names it: a FIFO as redis_password_file=');
}

# files of their own pass
my ($rc, $out) = $t->test_conf("ratelimit_zone a 1m state=$p/a.state overrides_file=$p/a.ov;\n"
                               . "ratelimit_zone b 1m state=$p/st/b.state overrides_file=$p/st/b.ov;\n"
                               . "ratelimit_zone c 1m;\n");
is($rc, 0, 'every zone with files of its own: accepted') or diag($out);
unlike($out, qr/\[(emerg|warn)\]/, 'nothing said');

done_testing();
