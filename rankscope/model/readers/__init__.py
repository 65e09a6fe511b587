"""Readers, one per source format: Kineto / torch.profiler JSON (``kineto``), the Ascend family
(``ascend``: torch_npu text and DB exports, MindSpore / MindInsight), PyTorch Flight Recorder dumps (``frdump``)
and rankscope's RPC files (``rpcfiles``). They turn files into the model's tables; they import the model core
and ``store``, never the analyses."""
