
“
shopweb

appweb"

ReplicaSetweb-7d9fuid-rs*
cpu250m*
memory128Mi2
cpu1:
diskssdB#
	dedicatedEqualgpu"
NoScheduleHdnode-anode-b"loadstar(